"""Helpers shared by the tests: tiny real models built with onnx.helper (models), independent reference
computations (reference), a progress collector (reporting), inputs that expand in memory (memory_cases), the
engine's import graph (import_graph) and the app under AppTest as a real server runs it (app_session)."""
