"""How tokens are sampled: the CPU decoder, its C++ kernels, the sampling plan, the transformers and vLLM backends."""
