"""Inspecting runs from outside the engine: ``durably runs why`` and ``replay --check``."""
