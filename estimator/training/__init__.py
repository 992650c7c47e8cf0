"""The training model: what one layout of a training job holds in memory, how long its step takes, and what the
estimate says about it.

``layout`` (degrees, shard groups and the checks of one layout), ``pipeline_split`` (layers per stage),
``optimizers`` and ``precision`` (state bytes by optimizer, precision and framework), ``params`` (what the busiest
rank holds), ``tensors`` (each rank's tensors, by shape and shard), ``activations``, ``overhead`` and ``memory``
(the per-phase peak and the largest micro-batch that fits), ``flops``, ``efficiency`` (achieved rates), ``comm``
(the GPU fabric and collectives) and ``timing`` (the step), ``checkpoint`` (checkpoint bytes, write time and
target) and ``train`` (time to train a token budget), ``accuracy`` (error bars), ``explain`` (assumptions and
warnings) and ``suggest`` (ways out of an OOM). The model description it reads is :mod:`estimator.model`; the
entry point that puts one estimate together is :mod:`estimator.estimate`. This face imports nothing, so loading
one module does not load the others.
"""
