"""The Llama family's export, torch-free: GGUF files (`gguf`, read by `gguf_read` after
`gguf_check` has bounded them, tokenizer by `gguf_tokenizer`) and Hugging Face Llama / Qwen2
checkpoints (`hf_checkpoint`) become one lean decoder graph (`graph`) in one bundle layout
(`bundle`); `adapter` turns a PEFT LoRA into an adapter bundle on such a base; `fetch` and
`flagship` find the flagship GGUF (SmolLM2-135M-Instruct) and convert it once into the cache.

The app, serve and a Space import this folder (the flagship); nothing here imports torch.
"""
