"""ASGI entry point: gunicorn runs this with uvicorn workers (gunicorn.conf.py).

`application` is Django's ASGI app with the chat fast path in front
(marina/fastpath.py); `django_application` is Django's alone."""
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "marina.settings")

django_application = get_asgi_application()

from marina.fastpath import wrap  # noqa: E402  (needs the settings configured above)

application = wrap(django_application)
