"""ortlab: make ONNX models smaller and faster with ONNX Runtime, and show why it is safe to ship.

The engine (this package minus ``ortlab.ui``) depends on onnx, onnxruntime, numpy and pillow only.

No telemetry leaves the machine: ONNX Runtime (1.31, Linux) sends usage events to Microsoft's OneCollector
host (``mobile.events.data.microsoft.com``) some seconds after a session starts unless ``ORT_DISABLE_TELEMETRY=1``
is in the environment; ``onnxruntime.disable_telemetry_events()`` does not stop it. This file runs before any
ortlab module imports onnxruntime (the CLI, the app's server, which imports ortlab in app.py before any page
loads ONNX Runtime, and every child, whose environment ``runtime.child.child_env`` copies), so it sets the
switch here, for this process and everything it starts. It overrides a value the user set: ortlab promises
not to call out to the internet, and offers no way to opt in to a dependency's telemetry.
"""

import os

NO_TELEMETRY_ENV = {"ORT_DISABLE_TELEMETRY": "1"}  # environment that switches the runtimes' telemetry off
os.environ.update(NO_TELEMETRY_ENV)

__version__ = "0.1.0"
