"""coevo: train LLM agents that improve themselves from their own interaction with text envs."""

__version__ = "0.1.0"
