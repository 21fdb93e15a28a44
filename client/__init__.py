"""Record from your own code: the Python client, the pytest plugin and the live Inspect hook.

`evaledger.run(...)` records a run case by case; `evaledger.open(...)` reads a store back. Both
speak to a local store (`db=`) or a server (`url=`, `token=`) with the same semantics.
"""

from evaledger.client.files import compare_files
from evaledger.client.reader import Reader, RunReport, open
from evaledger.client.recorder import CaseRecorder, RunRecorder, run

__all__ = ["CaseRecorder", "Reader", "RunRecorder", "RunReport", "compare_files", "open", "run"]
