"""Inspecting runs from outside the engine: ``durably runs why`` and ``replay --check``.

- :mod:`durably.inspect.why`: ``durably runs why`` / ``durably.explain``, split into the
  facts (:mod:`.why_facts`, what the journal says, structured) and the sentences
  (:mod:`.why_sentences`, the words).
- :mod:`durably.inspect.replaycheck`: ``durably replay --check``.

It sits above the engine (``lint-imports``): nothing below imports it.
"""
