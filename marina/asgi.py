"""ASGI entry point: gunicorn runs this with uvicorn workers (gunicorn.conf.py).

`application` is passthru/intake.py (the key and the body limit checked before a
body is read) in front of two Django handlers (marina/mounts.py): /v1/ served
by the NinjaAPI through the API's own handler, everything else by Django's."""
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "marina.settings")

site = get_asgi_application()

from marina.mounts import ApiHandler, Doors  # noqa: E402
from passthru.intake import Intake  # noqa: E402  (needs the settings configured above)

application = Intake(Doors(api=ApiHandler(), site=site))
# The whole site's handler alone (every route through settings.MIDDLEWARE):
# tests/marina/test_one_door.py checks /v1 answers exactly as it would.
site_application = Intake(site)
