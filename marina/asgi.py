"""ASGI entry point: gunicorn runs this with uvicorn workers (gunicorn.conf.py)."""
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "marina.settings")

application = get_asgi_application()
