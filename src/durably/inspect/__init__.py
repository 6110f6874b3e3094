"""The inspect room: tools that read a journal and say what it shows, over the engine's
public reads.

- :mod:`durably.inspect.why`: ``durably runs why`` / ``durably.explain``, split into the
  facts (:mod:`.why_facts`, what the journal says, structured) and the sentences
  (:mod:`.why_sentences`, the words).

It sits above the engine (``lint-imports``): nothing below imports it, and it reaches no
store, driver or replay internals.
"""
