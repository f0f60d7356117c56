"""The graph diff: two Cytoscape.js panes side by side (``graphdiff_component/``)."""
