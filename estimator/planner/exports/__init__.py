"""Launcher configs for a plan, each checked against the framework's own parser in the tests: ``launch``
(DeepSpeed JSON, Accelerate YAML, torchrun argv and the bundle), ``megatron`` (Megatron-LM arguments) and
``nccl`` (NCCL environment variables)."""
