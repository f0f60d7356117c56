"""The use cases the front ends (the app and the command line) reach through :mod:`ortlab.api`: one service per
thing a person does (models, data, recipes, checks, benchmarks, tuning, the workspace, this machine and its
cluster). Each groups the engine calls of its use case; the layers below are free to change shape as long as
these stay."""
