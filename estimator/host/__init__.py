"""Whole-node sizing: what one server of a training layout needs besides its GPUs.

``tensors`` (each rank's tensors), ``ram`` (host RAM per node), ``checkpoint`` (checkpoint bytes, write time and
target), ``network`` (inter-node traffic), ``sizing`` (the RAM, storage, network and power steps put together)
and ``bom`` (the bill of materials). The choices a request makes (``host`` object, defaults) are
:mod:`estimator.host_options`, on the ground floor with the request contract that carries them.
"""
