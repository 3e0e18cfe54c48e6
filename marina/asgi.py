"""ASGI entry point: gunicorn runs this with uvicorn workers (gunicorn.conf.py).

`application` is Django's ASGI app with the chat fast path in front
(marina/fastpath.py); `django_application` is Django's alone
(behind marina/intake.py's guard on /v1 request bodies)."""
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "marina.settings")

_django = get_asgi_application()

from marina.fastpath import wrap  # noqa: E402  (needs the settings configured above)
from marina.intake import guard  # noqa: E402

# Request bodies on /v1 are read only after the key and size checks, and never
# past MARINA_MAX_REQUEST_BYTES (marina/intake.py).
django_application = guard(_django)

application = wrap(django_application)
