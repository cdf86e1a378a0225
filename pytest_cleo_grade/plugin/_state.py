"""The plugin's state: the attributes a test report carries to the controller, the stash keys."""

from __future__ import annotations

from typing import Final

#: The TestReport attribute carrying a graded test's JSON to the controller. pytest copies a
#: report's extra attributes through its (xdist) serialisation, as it does for ``wasxfail``.
GRADE_ATTRIBUTE: Final = "cleo_grade"
