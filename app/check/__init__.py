"""``capplan check``: check an estimate on your own machine (issue 31).

- :mod:`app.check.record`: the measurement record (``POST /api/v1/measurements``'s body): the request, the
  versions, the GPU, the measured figures and capplan's estimate of the same figures; and the loader of our own
  calibration measurements into the same records.
- :mod:`app.check.trace`: ``--trace``, the request's model built from its config under PyTorch's fake tensors on
  a fake process group, forward + backward + optimizer step traced on any CPU (no GPU, no download).
- :mod:`app.check.run`: ``--run``, a few real steps on the GPUs of this machine.
- :mod:`app.check.random_init`: the random weights of both, and of the calibration's ``measure*.py`` (torch only).
- :mod:`app.check.command`: from a request to the record (both command lines), and ``python -m app.check``, the
  command line without the web dependencies (a bare GPU machine).

Only :mod:`app.check.record` is importable without the ``check`` extra (torch, transformers, peft).
"""
