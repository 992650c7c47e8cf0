"""The model description both the training and the inference model read.

``spec``: presets (``data/model_presets.yaml``), Hugging Face ``config.json`` parsing, parameter counts, the
linear layers of a block and ``CachedShape`` (one shape per architecture, its counts computed once). This face
imports nothing, so loading it does not load the others.
"""
