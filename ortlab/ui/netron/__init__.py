"""The Netron viewer: its files, their checks and patches, and the Streamlit component that shows them."""
