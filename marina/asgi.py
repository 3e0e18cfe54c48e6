"""ASGI entry point: gunicorn runs this with uvicorn workers (gunicorn.conf.py).

`application` is Django's ASGI app with the chat fast path in front
(marina/fastpath.py); `django_application` is Django's without it, behind
marina/intake.py (the key and the body limit checked before a body is read)."""
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "marina.settings")

django = get_asgi_application()

from marina.fastpath import wrap  # noqa: E402  (needs the settings configured above)
from marina.intake import Intake  # noqa: E402

# Django types the scope as dict and messages as Mapping; the ASGI types here are MutableMapping.
django_application = Intake(django)

application = wrap(django_application)
