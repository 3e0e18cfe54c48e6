"""Which address a request came from, behind proxies one trusts (MARINA_TRUSTED_PROXIES).

`X-Forwarded-For` is a list each proxy *appends* to: its left part is whatever
the client sent, so only the hops the trusted proxies added can be believed.
The client is the right-most hop that is not a trusted proxy:

- a count N (`MARINA_TRUSTED_PROXIES=1`): N proxies stand in front of Marina, so
  the socket peer is the last of them and the client is the N-th hop from the
  right (the left-most when the list is shorter: it came through fewer);
- CIDRs (`10.0.0.0/8,192.168.1.7`): the peer must be one of them, then hops
  are read from the right, skipping those inside the networks;
- empty (the default): the socket peer, headers ignored.

`X-Real-IP` is read only when there is no `X-Forwarded-For` and the peer is
trusted. Pure functions; the server's settings hold the raw text."""
from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
MAX_ADDRESS_CHARS = 100


@dataclass(frozen=True)
class Trusted:
    count: int = 0  # this many proxies in front (count form)
    networks: tuple[Network, ...] = ()  # or these (CIDR form)

    @property
    def any(self) -> bool:
        return bool(self.count or self.networks)

    def trusts(self, address: str) -> bool:
        if self.count:
            return True  # the count form trusts the peer and reads hops by position
        try:
            ip = ipaddress.ip_address(address.strip())
        except ValueError:
            return False
        return any(ip in network for network in self.networks)


@lru_cache(maxsize=8)
def parse(raw: str) -> Trusted:
    """MARINA_TRUSTED_PROXIES: '' | a count | comma-separated addresses or CIDRs; ValueError naming the bad part."""
    raw = raw.strip()
    if not raw:
        return Trusted()
    if raw.isdigit():
        return Trusted(count=int(raw))
    networks = []
    for part in filter(None, (p.strip() for p in raw.split(","))):
        try:
            networks.append(ipaddress.ip_network(part, strict=False))
        except ValueError:
            raise ValueError(f"a count of proxies or comma-separated addresses/CIDRs, not {part!r}") from None
    return Trusted(networks=tuple(networks))


def client_address(peer: str, headers: Mapping[str, str], trusted: Trusted) -> str:
    """The client's address: see the module doc."""
    if not trusted.any or not trusted.trusts(peer):
        return peer or "unknown"
    hops = [h.strip() for h in headers.get("x-forwarded-for", "").split(",") if h.strip()]
    if not hops:
        real = headers.get("x-real-ip", "").strip()
        return real[:MAX_ADDRESS_CHARS] if real else (peer or "unknown")
    if trusted.count:
        return hops[-min(trusted.count, len(hops))][:MAX_ADDRESS_CHARS]
    for hop in reversed(hops):
        if not trusted.trusts(hop):
            return hop[:MAX_ADDRESS_CHARS]
    return hops[0][:MAX_ADDRESS_CHARS]  # every hop a trusted proxy: the first is as far back as can be known


def uvicorn_allow_ips(raw: str) -> str:
    """gunicorn's `forwarded_allow_ips` for MARINA_TRUSTED_PROXIES: the CIDRs,
    else nobody ('' : uvicorn's default would believe 127.0.0.1's headers). The
    count form is read by Marina alone (client_address)."""
    trusted = parse(raw)
    return ",".join(str(n) for n in trusted.networks)
