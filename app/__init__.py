"""The Streamlit dashboard. Entry file: app/main.py (a router over the pages in app/views/)."""
