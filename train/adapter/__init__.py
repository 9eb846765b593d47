"""LoRA fine-tunes of the flagship (SmolLM2-135M-Instruct) the seeds' way: training with
metadata fields as controls (`finetune`), measuring a fine-tune against its base and the
from-scratch Bible LM (`evaluation`), and shipping it as a measured adapter bundle (`ship`,
written by export/adapter.py)."""
