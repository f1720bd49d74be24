"""Configuration, sample data and the local demo of the project (not part of the engine package)."""
