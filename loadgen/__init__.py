"""llm-loadgen: load generator and traffic simulator for OpenAI-compatible LLM servers."""

__version__ = "0.1.0"
