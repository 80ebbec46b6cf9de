"""HopBase: an LLM API gateway for OpenAI and Anthropic SDKs over many deployments."""

__version__ = "0.1.0"
