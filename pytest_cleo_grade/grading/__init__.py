"""How one test is decided, without pytest: the graded session, the grader and its plan, the
pass predicate and the run's gate, repeated runs and their statistics, and the baseline.

Imports the folders below it (core, judges, store, rubrics, capture), never reports or pytest.
"""

from __future__ import annotations
