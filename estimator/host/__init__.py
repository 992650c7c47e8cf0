"""Whole-node sizing: what one server of a training layout needs besides its GPUs.

``ram`` (host RAM per node), ``network`` (inter-node traffic), ``sizing`` (the RAM, storage, network and power
steps put together) and ``bom`` (the bill of materials). Each rank's tensors and the checkpoint's bytes, write time
and target are the training model's (:mod:`estimator.training.tensors`, :mod:`estimator.training.checkpoint`);
node power and racks are :mod:`estimator.facility.rack`. The choices a request makes (``host`` object, defaults) are
:mod:`estimator.host_options`, on the ground floor with the request contract that carries them.
"""
