"""The parts of bench/grammar_engines.py: model files and vocabularies, tools, the two engines,
the measurements, the decode bench."""
