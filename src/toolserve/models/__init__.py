"""Models by name: references (`owner/repo[:QUANT]`, `hf://`, `ollama:`, `lmstudio:`), the Hugging
Face Hub through huggingface_hub, Ollama's and LM Studio's stores read in place, what is on disk
(`toolserve models`, `toolserve rm`) and the sampling defaults a model file carries."""
