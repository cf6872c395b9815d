"""Who is acting: the one place an approval is bound to a login (docs/approvals.md, Identity).

`current_identity` returns the caller's name and where it came from, preferring a source that
something other than the caller vouches for:

- `oidc`: a header the authenticating proxy in front of the webserver sets (oauth2-proxy:
  `X-Auth-Request-Email`, `X-Forwarded-Email`, `X-Auth-Request-User`, `X-Forwarded-User`),
  passed in by the layer that received the HTTP request; vouched for by the identity provider.
- `dagster`: the Dagster user a run was launched by, passed in by the Dagster layer (Dagster+
  tags runs launched from the UI with the user's email; open-source Dagster records no user, and
  a tag someone types at launch is not one); vouched for by Dagster+.
- `kubernetes`: with `GPU_PLATFORM_IDENTITY=kubernetes`, the user the API server authenticates
  this process's credentials as (a SelfSubjectReview: what `kubectl auth whoami` prints);
  vouched for by the API server.
- `os_user`: with `GPU_PLATFORM_IDENTITY=os_user` (one machine, its logins are its users), the
  login of this process's effective uid (`pwd`, not `$USER`, which anyone sets); vouched for by
  the operating system, so `configured`. Without `GPU_PLATFORM_IDENTITY` and no verified source
  passed in: `$USER` (else the login name), self-declared, vouched for by nobody (`verified`
  False): what such a caller records is marked unverified, and from scale S4 it is refused.

`GPU_PLATFORM_IDENTITY` (unset: take the first verified source passed in, else the unverified
`$USER`) names the one source a deployment requires: `oidc`, `dagster` or `kubernetes` refuse
(IdentityError) when that source has no answer instead of falling back to `$USER`.

Groups: an identity may carry the groups its source reports (`groups`: the proxy's
`X-Auth-Request-Groups` / `X-Forwarded-Groups`, comma-separated; a SelfSubjectReview's groups);
a policy names them `group:<name>` in `teams.<t>.members` and roster `members`.
Nothing here authenticates anyone: it reads what the deployment's authentication already
established, and says which source it was, so the ledger records it (`identity_source`).
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

IDENTITY_ENV = "GPU_PLATFORM_IDENTITY"
SOURCES = ("oidc", "dagster", "kubernetes", "os_user")
VERIFIED_SOURCES = ("oidc", "dagster", "kubernetes")
GROUP_HEADERS = ("X-Auth-Request-Groups", "X-Forwarded-Groups")
GROUP_PREFIX = "group:"
OIDC_HEADERS = ("X-Auth-Request-Email", "X-Forwarded-Email", "X-Auth-Request-User", "X-Forwarded-User")
"""Headers oauth2-proxy sets on requests it passes upstream (`--set-xauthrequest`,
`--pass-user-headers`), in the order they are preferred (an email before a user name)."""


class IdentityError(ValueError):
    """The deployment requires a verified identity and its source has no answer."""


@dataclass(frozen=True, slots=True)
class Identity:
    """Who is calling. source: where the name came from (SOURCES); configured: the deployment
    chose that source (`GPU_PLATFORM_IDENTITY`), so an `os_user` identity is the OS login, not
    `$USER`; groups: the groups the source reports (without the `group:` prefix)."""

    name: str
    source: str
    configured: bool = False
    groups: tuple[str, ...] = ()

    @property
    def verified(self) -> bool:
        """Vouched for by something other than the caller (not a self-declared `$USER`)."""
        return self.source in VERIFIED_SOURCES or self.configured

    def principals(self) -> frozenset[str]:
        """The names a policy's member list may use for this caller: the name and `group:<g>`."""
        return frozenset((self.name, *(GROUP_PREFIX + g for g in self.groups)))

    def is_any_of(self, members: tuple[str, ...] | list[str]) -> bool:
        """Whether a member list (people and `group:<name>`) names this caller."""
        return bool(self.principals() & set(members))


def os_login() -> str:
    """The login of this process's effective uid (the OS vouches for it; `$USER` is an assertion)."""
    try:
        import pwd

        return pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError, OSError):  # no passwd entry (a container's arbitrary uid)
        return f"uid:{os.geteuid()}" if hasattr(os, "geteuid") else getpass.getuser()


def groups_from_headers(headers: Mapping[str, str] | None) -> tuple[str, ...]:
    """The groups an authenticating proxy put in a request's headers (comma-separated), else ()."""
    if not headers:
        return ()
    lower = {str(k).lower(): v for k, v in headers.items()}
    for name in GROUP_HEADERS:
        value = str(lower.get(name.lower()) or "")
        found = tuple(g.strip() for g in value.split(",") if g.strip())
        if found:
            return found
    return ()


def configured_source(env: Mapping[str, str] | None = None) -> str:
    """The source the deployment requires (`GPU_PLATFORM_IDENTITY`, lower case), "" when unset."""
    env = os.environ if env is None else env
    return (env.get(IDENTITY_ENV) or "").strip().lower()


def identity_from_headers(headers: Mapping[str, str] | None) -> str | None:
    """The login an authenticating proxy put in a request's headers (case-insensitive), else None."""
    if not headers:
        return None
    lower = {str(k).lower(): v for k, v in headers.items()}
    for name in OIDC_HEADERS:
        value = str(lower.get(name.lower()) or "").strip()
        if value:
            return value
    return None


def current_identity(
    env: Mapping[str, str] | None = None,
    *,
    headers: Mapping[str, str] | None = None,
    dagster_user: str | None = None,
    kubernetes_user: Callable[[], str | tuple[str, tuple[str, ...]]] | None = None,
) -> Identity:
    """Who is acting, from the most trusted source present (see the module docstring).

    headers: the HTTP request's headers, from a layer behind an authenticating proxy.
    dagster_user: the Dagster user who launched the run, from the Dagster layer.
    kubernetes_user: asks the API server who this process's credentials are (called only when
    `GPU_PLATFORM_IDENTITY=kubernetes`; the CLI passes `gpu_platform.cluster.client.whoami`).
    """
    env = os.environ if env is None else env
    mode = (env.get(IDENTITY_ENV) or "").strip().lower() or "auto"
    if mode not in ("auto", *SOURCES):
        raise IdentityError(f"{IDENTITY_ENV}={mode!r}: not an identity source (one of: {', '.join(SOURCES)})")
    configured = mode != "auto"
    if mode == "os_user":
        return Identity(os_login(), "os_user", configured=True)
    oidc = identity_from_headers(headers)
    if oidc and mode in ("auto", "oidc"):
        return Identity(oidc, "oidc", configured, groups_from_headers(headers))
    if dagster_user and dagster_user.strip() and mode in ("auto", "dagster"):
        return Identity(dagster_user.strip(), "dagster", configured)
    if mode == "kubernetes":
        if kubernetes_user is None:
            raise IdentityError(f"{IDENTITY_ENV}=kubernetes: this caller cannot ask the API server who it is")
        try:
            answer = kubernetes_user()
            name, groups = (answer, ()) if isinstance(answer, str) else answer
            name = name.strip()
        except Exception as exc:  # no cluster, no credentials, an API server that says no
            raise IdentityError(f"{IDENTITY_ENV}=kubernetes: the API server did not say who this is ({exc})") from None
        if not name:
            raise IdentityError(f"{IDENTITY_ENV}=kubernetes: the API server returned no user name")
        return Identity(name, "kubernetes", True, tuple(groups))
    if mode in ("oidc", "dagster"):
        what = f"an {', '.join(OIDC_HEADERS)} header" if mode == "oidc" else "the Dagster user of the run"
        raise IdentityError(f"{IDENTITY_ENV}={mode}: no verified identity was passed ({what}); refusing to use $USER")
    return Identity(env.get("USER") or getpass.getuser(), "os_user")
