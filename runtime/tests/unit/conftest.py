"""The unit tests' shared helper modules (decorators_testlib) import by name, as the native tests' do."""

from __future__ import annotations

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # decorators_testlib
