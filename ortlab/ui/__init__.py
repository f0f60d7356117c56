"""Streamlit user interface of ortlab: session state, generated forms, jobs, charts and cards.

This package (with ``app.py`` and ``pages/``) is the only code that imports streamlit.
"""
