"""Run history: append-only records of every run, and the queries over them
(``history.run_history`` is the interface; the queries' types are the domain's)."""
