"""The session: its state, sign-in, routing, the sidebar, error display, inert text, per-session caches and the pages' engine calls."""
