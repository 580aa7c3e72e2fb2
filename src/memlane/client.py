"""``Client``: the same methods and return types as :class:`~memlane.core.memory.Memory`, over HTTP.

An agent on another machine talks to a ``memlane serve`` process with its
token and sees exactly what the service's visibility rule lets it see. HTTP
errors come back as the same memlane exceptions the library raises.

Every operation of :data:`memlane.values.operations.OPERATIONS` is a method made
from the table and ``Memory``'s signature (:mod:`memlane.values.surface`): it sends
the arguments given and turns the answer back into ``Memory``'s return type
(:data:`DECODE`). The few written here say why in :attr:`Client.DIFFERS`.
"""

from __future__ import annotations

import builtins
import json
import math
import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .values import errors, surface, wire
from .values import validate as v
from .values.agents import Agent, Change, Grant, Listing
from .values.facts import Chunk, Claim, Context, record_from_dict
from .values.model import Envelope, Item, Namespace, Page, Stats, Version
from .values.model import namespace_tuple as ns_tuple
from .values.operations import OPERATIONS, UNSENDABLE, Operation
from .values.query import QueryPlan, QueryResult, SavedQuery
from .values.retention import RetentionRule
from .values.validate import DEFAULT_WINDOW, RECORD_FIELDS, message_list

if TYPE_CHECKING:
    from .core.memory import Memory as _Operations  # a type checker sees Memory's operations, typed as Memory's
    from .domain.extract import Extractor
    from .domain.search.choose import Chooser
else:
    _Operations = object


def _rule(d: Mapping[str, Any]) -> RetentionRule:
    at = datetime.fromisoformat(d["updated_at"])
    return RetentionRule(
        ns_tuple(d["prefix"]) if d["prefix"] else (),
        d.get("keep_versions"),
        d.get("keep_days"),
        at,
        d.get("updated_by"),
    )


def _json(value: Any) -> Any:
    """An argument as JSON carries it: tuples and other sequences as lists, times as ISO text."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {k: _json(v) for k, v in value.items()}
    if isinstance(value, tuple | builtins.list):
        return [_json(v) for v in value]
    if hasattr(value, "tolist"):  # a numpy array or scalar
        return value.tolist()
    if isinstance(value, Iterator):  # a generator of addresses or claims: what the core would iterate
        return [_json(v) for v in value]
    return value


_PATHS = {op.name: op.route for op in OPERATIONS}


def _too_deep(field: str) -> errors.ValidationError:
    return errors.ValidationError(
        field, f"is nested more than {v.MAX_DEPTH} levels deep (lists and objects inside one another); nothing was sent"
    )


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _encode(body: dict[str, Any]) -> bytes:
    """A request body as UTF-8 JSON (as httpx would write it); what JSON cannot carry is refused by field."""
    try:
        text = _dumps(body)
    except (ValueError, RecursionError, TypeError):  # NaN or Infinity, nesting, a set: find the field
        for name, value in body.items():
            try:
                _dumps(value)
            except TypeError as e:
                raise errors.ValidationError(
                    name, f"holds what JSON cannot carry ({e}); send a list, a dict, text or a number"
                ) from None
            except ValueError:
                raise errors.ValidationError(
                    name, "contains NaN or Infinity, which JSON cannot carry; nothing was sent"
                ) from None
            except RecursionError:
                raise _too_deep(name) from None
        raise  # pragma: no cover - the whole body failed, so one of its fields does
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        field = next((name for name, value in body.items() if _unencodable(value)), "body")
        raise errors.ValidationError(
            field, "contains a lone UTF-16 surrogate, which is not valid Unicode text; nothing was sent"
        ) from None


def _unencodable(value: Any) -> bool:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, dict):
        return any(_unencodable(k) or _unencodable(v) for k, v in value.items())
    if isinstance(value, builtins.list):
        return any(_unencodable(v) for v in value)
    return False


def _check_json(value: Any, metadata: Any, ttl: Any) -> None:
    """Refuse what JSON cannot carry (NaN, Infinity, sets...) before sending, naming the field."""
    from .values import validate

    validate.value(value)
    validate.metadata(metadata)
    validate.ttl(ttl)


_SAFE = frozenset(op.name for op in OPERATIONS if op.safe)
RETRIES = 3
MAX_RETRY_WAIT = 30.0
# how long a request that found no service is tried again: longer than a worker takes to restart on a busy machine
RETRY_WINDOW = 10.0
# a lost connection's waits double from ``backoff`` up to this, so a service that is back is found within it
MAX_LOST_WAIT = 2.0


class Client(_Operations):
    """A memlane service seen through one agent's token.

    Args:
        url: the service's base URL, e.g. ``http://127.0.0.1:8420``; or several
            (a list), for several ``memlane serve`` processes over one
            PostgreSQL database with no proxy in front: the client talks to
            one and moves to the next when a connection fails.
        token: the agent's token (``memlane agent create NAME`` prints it).
        timeout: seconds per request.
        retries: how many times a request refused with 429 busy (it did not
            run), or a read answered 503 because the service's database is
            unreachable, is sent again, after the ``Retry-After`` seconds the
            service gives (at most 30); 0: never. A write answered 503 is never
            sent again: the database may have gone away as it committed.
        backoff: seconds before the first retry after a lost connection,
            doubled at each next one up to 2 seconds (or ``backoff``, if more),
            with jitter.
        retry_window: seconds, from the first try, during which a request
            whose connection failed is sent again (to the next URL, if
            several): always when it never reached a service (the connection
            was refused), and when it may have run only if it merely reads (a
            write may have been applied, so it is never sent twice). The
            default outlasts a worker's restart; 0: never.
    """

    # the operations written here rather than made from the table, and why
    DIFFERS = {
        "put": "refuses what JSON cannot carry (NaN, sets) before sending, naming the field",
        "put_many": "refuses unknown record fields before sending (the service ignores them: additive API)",
        "add_conversation": "the extractor is a Python object: it runs here and files through this client",
        "recall": "a chooser runs here; key, embedding, floor, min_score and where are sent only when given, "
        "so servers before 0.2 keep working",
    }

    def __init__(
        self,
        url: str | Sequence[str],
        token: str,
        *,
        timeout: float = 30.0,
        retries: int = RETRIES,
        backoff: float = 0.25,
        retry_window: float = RETRY_WINDOW,
    ) -> None:
        try:
            import httpx
        except ImportError as e:  # pragma: no cover - the client extra
            raise errors.BackendUnavailableError("memlane.Client needs httpx: pip install 'memlane[client]'") from e
        urls = [url] if isinstance(url, str) else builtins.list(url) if isinstance(url, Sequence) else []
        if not urls or not all(isinstance(u, str) and u.strip() for u in urls):
            raise errors.ValidationError(
                "url", "must be a service URL such as http://127.0.0.1:8420, or a list of them"
            )
        for u in urls:
            _check_url(u.strip())
        if not isinstance(token, str) or not token.strip() or not all("!" <= c <= "~" for c in token):
            raise errors.ValidationError(
                "token", f"must be an agent's token as `memlane agent create NAME` prints it, not {token!r}"
            )
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise errors.ValidationError("retries", f"must be a whole number >= 0, not {retries!r}")
        if isinstance(backoff, bool) or not isinstance(backoff, int | float) or not 0 <= backoff <= MAX_RETRY_WAIT:
            raise errors.ValidationError("backoff", f"must be a number of seconds in [0, 30], not {backoff!r}")
        if (
            isinstance(retry_window, bool)
            or not isinstance(retry_window, int | float)
            or not math.isfinite(retry_window)
            or retry_window < 0
        ):
            raise errors.ValidationError("retry_window", f"must be a number of seconds >= 0, not {retry_window!r}")
        self.urls = [u.strip().rstrip("/") for u in urls]
        self._current = 0
        self.retries = retries
        self.backoff = float(backoff)
        self.retry_window = float(retry_window)
        self._http = httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=timeout)
        self._httpx = httpx
        # failures before a request left this process: it cannot have run, so it may always be sent again
        self._unsent = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)

    @property
    def url(self) -> str:
        """The service this client talks to now."""
        return self.urls[self._current]

    def __repr__(self) -> str:  # never the token
        return f"<Client {self.url}>"

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transport --------------------------------------------------------

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None, *, safe: bool | None = None) -> Any:
        """Send one request, retrying what did not run; ``safe``: it only reads (a GET always does)."""
        content = None if body is None else _encode(body)
        headers = None if body is None else {"Content-Type": "application/json"}
        repeatable = method == "GET" if safe is None else safe
        deadline = time.monotonic() + self.retry_window
        busy = 0  # 429s (and 503s of a read) so far
        step = self.backoff  # the next wait after a failed connection, doubled each time up to the cap
        while True:
            url = self.url
            try:
                resp = self._http.request(method, f"{url}/v1/{path}", content=content, headers=headers)
            except self._httpx.HTTPError as e:
                never_sent = isinstance(e, self._unsent)
                if not never_sent and isinstance(e, self._httpx.TimeoutException):
                    # the service is still working on it: sending it again would only add to its load
                    raise errors.StoreError(
                        f"cannot reach the memlane service at {url}: no answer within {self._http.timeout.read}s; "
                        + (
                            "raise the Client's timeout or ask for less"
                            if repeatable
                            else "a write may or may not have been applied: read it back before sending it again"
                        )
                    ) from None
                if len(self.urls) > 1:
                    self._current = (self._current + 1) % len(self.urls)  # the next service, for this try and later
                if not (never_sent or repeatable):
                    raise errors.StoreError(
                        f"cannot reach the memlane service at {url}: {e}; the request was sent, so a write may or "
                        "may not have been applied: read it back before sending it again"
                    ) from None
                left = deadline - time.monotonic()
                if left <= 0:
                    raise errors.StoreError(
                        f"cannot reach the memlane service at {url}: {e} (tried for {self.retry_window:g} s; "
                        "start the service, or raise the Client's retry_window)"
                    ) from None
                time.sleep(min(step * (0.5 + random.random() / 2), left))
                step = min(step * 2, max(self.backoff, MAX_LOST_WAIT))
                continue
            if resp.status_code == 200:
                return resp.json() if resp.headers.get("content-type", "").startswith("application/json") else resp.text
            try:
                err = resp.json()["error"]
            except (ValueError, KeyError, TypeError):
                err = {"message": resp.text[:200]}
            if isinstance(err, dict) and "retry_after" not in err and resp.headers.get("retry-after", "").isdigit():
                err = {**err, "retry_after": int(resp.headers["retry-after"])}
            failure = wire.decode(err, resp.status_code, suffix=f" (HTTP {resp.status_code} from {url})")
            # refused before it ran (429), or a read the database could not serve (503): safe to send again
            again: errors.BusyError | errors.StoreUnavailableError | None = None
            if isinstance(failure, errors.BusyError):
                again = failure
            if repeatable and isinstance(failure, errors.StoreUnavailableError):
                again = failure
            if again is not None and busy < self.retries:
                time.sleep(min(float(again.retry_after), MAX_RETRY_WAIT))  # the wait the service asked for
                busy += 1
                continue
            raise failure

    def _send(self, operation: str, args: dict[str, Any]) -> Any:
        """POST one operation of the table with a method's arguments (its ``locals()``) as the body."""
        body = {}
        for name, arg in args.items():
            if name == "self" or name in UNSENDABLE:
                continue
            try:
                body[name] = _json(arg)
            except RecursionError:  # far past the service's budget: refused here, as the service would
                raise _too_deep(name) from None
        return self._call("POST", _PATHS[operation], body, safe=operation in _SAFE)

    # -- writes -----------------------------------------------------------

    def put(
        self,
        namespace: Namespace | str,
        key: str | None,
        value: Any,
        *,
        text: str | None = None,
        metadata: dict[str, Any] | None = None,
        ttl: float | None = None,
        if_absent: bool = False,
        index: bool = True,
    ) -> Item:
        """Write (upsert) a value; see :meth:`Memory.put` (``index=False`` keeps it out of search)."""
        _check_json(value, metadata, ttl)
        return Item.from_dict(self._send("put", locals()))

    def put_many(self, records: Iterable[Mapping[str, Any]], *, if_absent: bool = False) -> builtins.list[Item]:
        """Write many records in one transaction; a record's ``"index": False`` keeps it out of search."""
        sent: builtins.list[Any] = []
        for n, r in enumerate(records):
            if isinstance(r, Mapping):
                # the service ignores unknown record fields (additive API); this
                # client refuses them like Memory does, so a typo is not lost silently
                unknown = sorted(set(r) - RECORD_FIELDS)
                if unknown:
                    raise errors.ValidationError("records", f"record {n} has unknown fields {unknown}")
                try:
                    _check_json(r.get("value"), r.get("metadata"), r.get("ttl"))
                except errors.ValidationError as e:
                    raise errors.ValidationError(
                        e.field, f"{str(e).split(': ', 1)[1]} (record {n}); nothing was written"
                    ) from e
            sent.append(r)
        return [Item.from_dict(i) for i in self._send("put_many", {"records": sent, "if_absent": if_absent})["items"]]

    def add_conversation(
        self,
        namespace: Namespace | str,
        messages: Iterable[Mapping[str, Any]],
        *,
        session: str | None = None,
        at: datetime | str | None = None,
        window: int = DEFAULT_WINDOW,
        extractor: Extractor | None = None,
    ) -> builtins.list[Item]:
        """Store a conversation, one item per turn; see :meth:`Memory.add_conversation`.

        An ``extractor`` runs here, in the caller's process, and files what it
        finds through this client's facts methods.
        """
        sent = {"namespace": namespace, "messages": message_list(messages), "session": session, "at": at}
        items = [Item.from_dict(i) for i in self._send("add_conversation", {**sent, "window": window})["items"]]
        if extractor is not None:
            from .domain.extract import run

            run(self, v.namespace(namespace), items, extractor)
        return items

    def cleanup(self) -> int:
        """Physically delete expired rows (admin tokens only)."""
        return int(self._call("POST", "cleanup")["deleted"])

    # -- reads outside the table ------------------------------------------

    def stats(self) -> Stats:
        """Store counts (admin tokens only)."""
        return Stats.from_dict(self._call("GET", "stats"))

    def export_records(self) -> Iterator[dict[str, Any]]:
        """Every item the agent may see, as exported records."""
        text = self._call("GET", "export")
        for line in text.splitlines():
            if line.strip():
                yield json.loads(line)

    def recall(
        self,
        query: str,
        *,
        key: str | None = None,
        namespace_prefix: Namespace | str = (),
        limit: int = 10,
        mode: str = "hybrid",
        embedding: Sequence[float] | None = None,
        chooser: Chooser | None = None,
        floor: bool | None = None,
        min_score: float | None = None,
        where: Mapping[str, Any] | None = None,
    ) -> Envelope:
        """The agent's entry point; see :meth:`Memory.recall`.

        A chooser runs here, in the client's process: it sees the map of what
        this agent may read and the chosen addresses are read with ``get_many``.
        """
        if chooser is not None and key is None and mode in ("single", "tiered"):
            from .domain.search.choose import choose

            if where is not None:
                raise errors.ValidationError("where", f"mode {mode!r} with a chooser takes no where; use mode 'hybrid'")

            return choose(self, query, chooser, mode=mode, namespace_prefix=namespace_prefix, limit=limit)
        # "namespace": the name servers before 0.2 read (newer ones accept it too)
        body: dict[str, Any] = {"query": query, "namespace": namespace_prefix, "limit": limit, "mode": mode}
        given = {"key": key, "embedding": embedding, "floor": floor, "min_score": min_score, "where": where}
        body |= {name: arg for name, arg in given.items() if arg is not None}  # so older servers keep working
        return Envelope.from_dict(self._send("recall", body))

    def recall_keyed(
        self, key: str, fallback_query: str, namespace: Namespace | str | None = None, *, limit: int = 10
    ) -> Envelope:
        """Keyed recall that stays exact against any server version.

        Sends both the key and a fallback query. Only hits whose key equals
        ``key`` are accepted, so a server that ignores ``key`` (and searches
        instead) can never hand back a different item; in that case the exact
        ``fetch`` operation fills in what the search missed.
        """
        env = self.recall(fallback_query, key=key, namespace_prefix=namespace or (), limit=limit)
        keyed = env.params.get("mode") == "keyed"
        hits = [h for h in env.hits if h.key == key]
        if not keyed:
            env.notes.append("the server ignored 'key'; kept only hits with that key and fetched it exactly")
            seen = {(h.namespace, h.key) for h in hits}
            for item in self.fetch(key, namespace_prefix=namespace or (), limit=limit):
                if (item.namespace, item.key) not in seen:
                    from .values.model import Hit

                    hits.append(Hit(item, 0.0))
            hits.sort(key=lambda h: (-h.item.updated_at.timestamp(), "/".join(h.namespace)))
        env.hits = hits[:limit]
        return env

    # -- administration (an admin agent's token) ------------------------------
    #
    # The same methods as :class:`memlane.core.access.Access`, over ``/v1/admin``; a non-admin token gets
    # ForbiddenError, a missing agent or room NotFoundError, a bad name ValidationError, as everywhere.

    def me(self) -> Agent:
        """The agent this client's token belongs to, with its rooms and grants."""
        return _agent(self._call("GET", "me"))

    def create_agent(self, name: str, *, admin: bool = False) -> tuple[Agent, str]:
        """Create an agent; returns it with its token, shown only this once."""
        answer = self._call("POST", "admin/agents", {"name": name, "admin": admin})
        return _agent(answer["agent"]), answer["token"]

    def rotate_token(self, name: str) -> str:
        """Issue a new token for an agent; the old one stops working at once."""
        return str(self._call("POST", f"admin/agents/{_segment(name, 'agent')}/token", {})["token"])

    def delete_agent(self, name: str) -> bool:
        """Delete an agent, its memberships and grants (its items stay); ``False`` if there was none."""
        return bool(self._call("DELETE", f"admin/agents/{_segment(name, 'agent')}")["deleted"])

    def agent(self, name: str) -> Agent:
        """An agent by name, with its rooms and grants."""
        return _agent(self._call("GET", f"admin/agents/{_segment(name, 'agent')}"))

    def agent_page(self, *, limit: int = 1000, cursor: str | None = None) -> Listing:
        """One page of agents by name; pass ``next_cursor`` back for the next."""
        answer = self._call("GET", "admin/agents?" + _query(limit=limit, cursor=cursor))
        return Listing([_agent(a) for a in answer["agents"]], answer.get("next_cursor"))

    def agents(self, *, limit: int = 1000, cursor: str | None = None) -> builtins.list[Agent]:
        """Agents by name, a page at a time (see :meth:`agent_page` for the cursor)."""
        return self.agent_page(limit=limit, cursor=cursor).entries

    def create_room(self, name: str) -> dict[str, Any]:
        """Create a room (``room/<name>``); idempotent. Returns ``{name, members}``."""
        return self._call("POST", "admin/rooms", {"name": name})  # type: ignore[no-any-return]

    def room_page(self, *, limit: int = 1000, cursor: str | None = None) -> Listing:
        """One page of rooms by name with their members; pass ``next_cursor`` back for the next."""
        answer = self._call("GET", "admin/rooms?" + _query(limit=limit, cursor=cursor))
        return Listing(answer["rooms"], answer.get("next_cursor"))

    def rooms(self, *, limit: int = 1000, cursor: str | None = None) -> builtins.list[dict[str, Any]]:
        """Rooms with their members, a page at a time (see :meth:`room_page`)."""
        return self.room_page(limit=limit, cursor=cursor).entries

    def add_member(self, room: str, agent: str) -> dict[str, Any]:
        """Add an agent to a room; returns the room with its members."""
        return self._call("POST", f"admin/rooms/{_segment(room, 'room')}/members", {"agent": agent})  # type: ignore[no-any-return]

    def remove_member(self, room: str, agent: str) -> dict[str, Any]:
        """Remove an agent from a room (effective at its next request); returns the room with its members."""
        return self._call("DELETE", f"admin/rooms/{_segment(room, 'room')}/members/{_segment(agent, 'agent')}")  # type: ignore[no-any-return]

    def grant(self, agent: str, prefix: Namespace | str, mode: str) -> Agent:
        """Give an agent ``read`` or ``write`` on a namespace prefix; returns the agent."""
        return _agent(self._call("POST", "admin/grants", {"agent": agent, "prefix": _json(prefix), "mode": mode}))

    def revoke(self, agent: str, prefix: Namespace | str) -> Agent:
        """Remove an agent's grant on a prefix (effective at its next request); returns the agent."""
        return _agent(self._call("POST", "admin/revoke", {"agent": agent, "prefix": _json(prefix)}))

    def access_log(
        self, *, agent: str | None = None, room: str | None = None, after: int = 0, limit: int = 1000
    ) -> builtins.list[Change]:
        """The access log, oldest first: who changed agents, rooms, members and grants, and when
        (:meth:`memlane.core.access.Access.history`); ``after`` a ``seq`` to read on from."""
        answer = self._call("GET", "admin/log?" + _query(agent=agent, room=room, after=after, limit=limit))
        return [_change(c) for c in answer["changes"]]


def _check_url(url: str) -> None:
    """Refuse a base URL that could never reach a service (no scheme, no host) when the client is made, not at the
    first request after its retries."""
    from urllib.parse import urlsplit

    if "://" not in url:
        raise errors.ValidationError("url", f"{url!r} has no scheme: write http://{url} (or https://)")
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https"):
        raise errors.ValidationError("url", f"{url!r} must start with http:// or https://")
    if not parts.hostname:
        raise errors.ValidationError("url", f"{url!r} names no host: write e.g. http://127.0.0.1:8420")


def _segment(name: Any, field: str) -> str:
    """An agent or room name as one URL path segment, checked by the service's rule first (a name with ``/``
    could not travel in a path), so a bad one is the same ``ValidationError`` the service gives."""
    from urllib.parse import quote

    return quote(v.namespace((name,), field)[0], safe="")


def _query(**params: Any) -> str:
    from urllib.parse import urlencode

    return urlencode({k: v for k, v in params.items() if v is not None})


# the answer of each result shape (operations.Operation.result) as Memory returns it
DECODE: dict[str, Callable[[Any], Any]] = {
    "item": Item.from_dict,
    "found": Item.from_dict,
    "items": lambda a: [None if i is None else Item.from_dict(i) for i in a["items"]],
    "page": Page.from_dict,
    "gone": lambda a: True,
    "exists": lambda a: bool(a["exists"]),
    "deleted": lambda a: a["deleted"],  # a count (clear) or a bool (delete_saved_query), as JSON carries it
    "namespaces": lambda a: [tuple(ns) for ns in a["namespaces"]],
    "summary": lambda a: a["summary"],
    "activity": lambda a: a,
    "versions": lambda a: [Version.from_dict(x) for x in a["versions"]],
    "envelope": Envelope.from_dict,
    "record": record_from_dict,
    "records": lambda a: [record_from_dict(r) for r in a["records"]],
    "context": Context.from_dict,
    "claims": lambda a: [Claim.from_dict(c) for c in (a["claims"] if "claims" in a else a["records"])],  # 0.1: records
    "chunks": lambda a: [Chunk.from_dict(c) for c in a["chunks"]],
    "retention_rule": lambda a: _rule(a),
    "retention_rules": lambda a: [_rule(r) for r in a["rules"]],
    "cleared": lambda a: bool(a["cleared"]),
    "imported": lambda a: int(a["imported"]),
    "query_result": QueryResult.from_dict,
    "query_plan": QueryPlan.from_dict,
    "query_space": lambda a: a,
    "space_matches": lambda a: a["matches"],
    "saved_query": SavedQuery.from_dict,
    "saved_queries": lambda a: [SavedQuery.from_dict(q) for q in a["queries"]],
}
# shapes whose 404 is an answer: nothing there
ABSENT = {"found": None, "gone": False}


def _remote(op: Operation) -> Callable[..., Any]:
    decode = DECODE[op.result]
    absent = op.result in ABSENT

    def method(self: Client, *args: Any, **kwargs: Any) -> Any:
        try:
            answer = self._send(op.name, surface.arguments(op.name, args, kwargs))
        except errors.NotFoundError:
            if absent:
                return ABSENT[op.result]
            raise
        return decode(answer)

    return method


surface.fill(Client, _remote)


def _agent(d: Mapping[str, Any]) -> Agent:
    grants = tuple(Grant(ns_tuple(g["prefix"]), g["mode"]) for g in d.get("grants", ()))
    return Agent(d["name"], bool(d.get("admin")), grants, tuple(d.get("rooms", ())))


def _change(d: Mapping[str, Any]) -> Change:
    prefix = d.get("prefix")
    return Change(
        d["seq"],
        datetime.fromisoformat(d["at"]),
        d.get("actor"),
        d["action"],
        d.get("agent"),
        d.get("room"),
        None if prefix is None else ns_tuple(prefix),
        d.get("mode"),
    )
