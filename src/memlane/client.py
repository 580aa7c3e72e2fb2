"""``Client``: the same methods and return types as :class:`~memlane.memory.Memory`, over HTTP.

An agent on another machine talks to a ``memlane serve`` process with its
token and sees exactly what the service's visibility rule lets it see. HTTP
errors come back as the same memlane exceptions the library raises.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from . import errors, wire
from .facts.model import Chunk, Claim, Context, Document, Entity, Fact, Record, record_from_dict
from .facts.text import DEFAULT_CHUNK_CHARS
from .memory import CHANNELS, RECORD_FIELDS
from .model import Envelope, Item, Namespace, Page, Stats, Version
from .query.model import QueryPlan, QueryResult, SavedQuery
from .retention import RetentionRule

if TYPE_CHECKING:
    from .search.choose import Chooser


def _rule(d: Mapping[str, Any]) -> RetentionRule:
    prefix = tuple(d["prefix"].split("/")) if d["prefix"] else ()
    at = datetime.fromisoformat(d["updated_at"])
    return RetentionRule(prefix, d.get("keep_versions"), d.get("keep_days"), at, d.get("updated_by"))


def _ns(namespace: Any) -> Any:
    return list(namespace) if isinstance(namespace, tuple) else namespace


def _check_json(value: Any, metadata: Any, ttl: Any) -> None:
    """Refuse what JSON cannot carry (NaN, Infinity, sets...) before sending, naming the field."""
    from . import validate

    validate.value(value)
    validate.metadata(metadata)
    validate.ttl(ttl)


class Client:
    """A memlane service seen through one agent's token.

    Args:
        url: the service's base URL, e.g. ``http://127.0.0.1:8420``.
        token: the agent's token (``memlane agent create NAME`` prints it).
        timeout: seconds per request.
    """

    def __init__(self, url: str, token: str, *, timeout: float = 30.0) -> None:
        try:
            import httpx
        except ImportError as e:  # pragma: no cover - the client extra
            raise errors.BackendUnavailableError("memlane.Client needs httpx: pip install 'memlane[client]'") from e
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=timeout)
        self._httpx = httpx

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

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        try:
            resp = self._http.request(method, f"/v1/{path}", json=body)
        except self._httpx.HTTPError as e:
            raise errors.StoreError(f"cannot reach the memlane service at {self.url}: {e}") from None
        if resp.status_code == 200:
            return resp.json() if resp.headers.get("content-type", "").startswith("application/json") else resp.text
        try:
            err = resp.json()["error"]
        except (ValueError, KeyError, TypeError):
            err = {"message": resp.text[:200]}
        if isinstance(err, dict) and "retry_after" not in err and resp.headers.get("retry-after", "").isdigit():
            err = {**err, "retry_after": int(resp.headers["retry-after"])}
        raise wire.decode(err, resp.status_code, suffix=f" (HTTP {resp.status_code} from {self.url})")

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
    ) -> Item:
        """Write (upsert) a value; see :meth:`Memory.put`."""
        _check_json(value, metadata, ttl)
        body = {
            "namespace": _ns(namespace),
            "key": key,
            "value": value,
            "text": text,
            "metadata": metadata,
            "ttl": ttl,
            "if_absent": if_absent,
        }
        return Item.from_dict(self._call("POST", "put", body))

    def put_many(self, records: Iterable[Mapping[str, Any]], *, if_absent: bool = False) -> builtins.list[Item]:
        """Write many records in one transaction."""
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
                r = dict(r) | ({"namespace": _ns(r["namespace"])} if "namespace" in r else {})
            sent.append(r)
        body = {"records": sent, "if_absent": if_absent}
        return [Item.from_dict(i) for i in self._call("POST", "put_many", body)["items"]]

    def delete(self, namespace: Namespace | str, key: str) -> bool:
        """Delete an item; ``False`` if there was none."""
        try:
            self._call("POST", "delete", {"namespace": _ns(namespace), "key": key})
        except errors.NotFoundError:
            return False
        return True

    def clear(self, namespace_prefix: Namespace | str) -> int:
        """Delete everything under a prefix the agent may write."""
        return int(self._call("POST", "clear", {"namespace_prefix": _ns(namespace_prefix)})["deleted"])

    def set_retention(
        self, prefix: Namespace | str, *, keep_versions: int | None = None, keep_days: float | None = None
    ) -> RetentionRule:
        """Set a history retention rule (an admin token); see :meth:`Memory.set_retention`."""
        body = {"prefix": _ns(prefix), "keep_versions": keep_versions, "keep_days": keep_days}
        return _rule(self._call("POST", "set_retention", body))

    def retention_rules(self) -> builtins.list[RetentionRule]:
        """Every history retention rule (an admin token)."""
        return [_rule(r) for r in self._call("POST", "retention_rules", {})["rules"]]

    def clear_retention(self, prefix: Namespace | str) -> bool:
        """Remove the rule at exactly ``prefix`` (an admin token); ``False`` if there was none."""
        return bool(self._call("POST", "clear_retention", {"prefix": _ns(prefix)})["cleared"])

    def cleanup(self) -> int:
        """Physically delete expired rows (admin tokens only)."""
        return int(self._call("POST", "cleanup")["deleted"])

    # -- exact reads ------------------------------------------------------

    def get(self, namespace: Namespace | str, key: str) -> Item | None:
        """The item, or ``None``."""
        try:
            return Item.from_dict(self._call("POST", "get", {"namespace": _ns(namespace), "key": key}))
        except errors.NotFoundError:
            return None

    def get_many(self, addresses: Iterable[tuple[Namespace | str, str]]) -> builtins.list[Item | None]:
        """Many addresses in one request, in input order."""
        body = {"addresses": [[_ns(a[0]), *a[1:]] if isinstance(a, tuple | list) and a else a for a in addresses]}
        return [None if i is None else Item.from_dict(i) for i in self._call("POST", "get_many", body)["items"]]

    def fetch(self, key: str, *, namespace_prefix: Namespace | str = (), limit: int = 10) -> builtins.list[Item]:
        """Every visible item under exactly ``key``, newest first."""
        body = {"key": key, "namespace_prefix": _ns(namespace_prefix), "limit": limit}
        return [Item.from_dict(i) for i in self._call("POST", "fetch", body)["items"]]

    def list(
        self,
        namespace_prefix: Namespace | str = (),
        *,
        key_prefix: str = "",
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page:
        """Items in address order, one page at a time."""
        body = {"namespace_prefix": _ns(namespace_prefix), "key_prefix": key_prefix, "limit": limit, "cursor": cursor}
        return Page.from_dict(self._call("POST", "list", body))

    def namespaces(self, prefix: Namespace | str = (), *, max_depth: int | None = None) -> builtins.list[Namespace]:
        """Namespaces the agent may see."""
        out = self._call("POST", "namespaces", {"prefix": _ns(prefix), "max_depth": max_depth})["namespaces"]
        return [tuple(ns) for ns in out]

    def summarize(
        self, namespace_prefix: Namespace | str = (), *, depth: int = 3, key_prefix: str = ""
    ) -> dict[str, dict[str, int]]:
        """The taxonomy map."""
        body = {"namespace_prefix": _ns(namespace_prefix), "depth": depth, "key_prefix": key_prefix}
        return self._call("POST", "summarize", body)["summary"]  # type: ignore[no-any-return]

    def history(self, namespace: Namespace | str, key: str) -> builtins.list[Version]:
        """Past versions, newest first."""
        out = self._call("POST", "history", {"namespace": _ns(namespace), "key": key})["versions"]
        return [Version.from_dict(x) for x in out]

    def stats(self) -> Stats:
        """Store counts (admin tokens only)."""
        return Stats.from_dict(self._call("GET", "stats"))

    def export_records(self) -> Iterator[dict[str, Any]]:
        """Every item the agent may see, as exported records."""
        text = self._call("GET", "export")
        for line in text.splitlines():
            if line.strip():
                yield json.loads(line)

    # -- ranked reads -----------------------------------------------------

    def search(
        self,
        query: str,
        *,
        namespace_prefix: Namespace | str = (),
        limit: int = 10,
        channels: Sequence[str] | None = CHANNELS,
        candidate_k: int | None = None,
        embedding: Sequence[float] | None = None,
        rrf_k: int = 10,
        weights: Mapping[str, float] | None = None,
    ) -> Envelope:
        """Ranked search; see :meth:`Memory.search`."""
        body = {
            "query": query,
            "namespace_prefix": _ns(namespace_prefix),
            "limit": limit,
            "channels": None if channels is None else builtins.list(channels),
            "candidate_k": candidate_k,
            "embedding": None if embedding is None else builtins.list(embedding),
            "rrf_k": rrf_k,
            "weights": None if weights is None else dict(weights),
        }
        return Envelope.from_dict(self._call("POST", "search", {k: v for k, v in body.items() if v is not None}))

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
    ) -> Envelope:
        """The agent's entry point; see :meth:`Memory.recall`.

        A chooser runs here, in the client's process: it sees the map of what
        this agent may read and the chosen addresses are read with ``get_many``.
        """
        if chooser is not None and key is None and mode in ("single", "tiered"):
            from .search.choose import choose

            return choose(self, query, chooser, mode=mode, namespace_prefix=namespace_prefix, limit=limit)
        body: dict[str, Any] = {"query": query, "namespace": _ns(namespace_prefix), "limit": limit, "mode": mode}
        if key is not None:
            body["key"] = key
        if embedding is not None:
            body["embedding"] = builtins.list(embedding)
        return Envelope.from_dict(self._call("POST", "recall", body))

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
                    from .model import Hit

                    hits.append(Hit(item, 0.0))
            hits.sort(key=lambda h: (-h.item.updated_at.timestamp(), "/".join(h.namespace)))
        env.hits = hits[:limit]
        return env

    # -- facts, claims and sources ------------------------------------------

    def _facts(self, op: str, **body: Any) -> Any:
        for name in ("namespace", "namespace_prefix"):
            if name in body:
                body[name] = _ns(body[name])
        for name in ("valid_from", "valid_to", "created_at", "asserted_at"):
            if isinstance(body.get(name), datetime):
                body[name] = body[name].isoformat()
        if isinstance(body.get("time"), Mapping):
            body["time"] = {k: t.isoformat() if isinstance(t, datetime) else t for k, t in body["time"].items()}
        for name in ("aliases", "about", "entity_ids", "ids", "text"):
            if isinstance(body.get(name), tuple):
                body[name] = builtins.list(body[name])
        return self._call("POST", op, body)

    def add_entity(
        self,
        namespace: Namespace | str,
        name: str,
        *,
        kind: str = "thing",
        aliases: Sequence[str] = (),
        profile: str = "",
    ) -> Entity:
        """Create an entity; see :meth:`Memory.add_entity`."""
        out = self._facts("add_entity", namespace=namespace, name=name, kind=kind, aliases=aliases, profile=profile)
        return Entity.from_dict(out)

    def add_alias(self, entity_id: str, alias: str) -> Entity:
        """Another name for an entity."""
        return Entity.from_dict(self._facts("add_alias", entity_id=entity_id, alias=alias))

    def merge_entities(self, survivor: str, merged: str) -> Entity:
        """Merge ``merged`` into ``survivor``."""
        return Entity.from_dict(self._facts("merge_entities", survivor=survivor, merged=merged))

    def assert_fact(
        self,
        namespace: Namespace | str,
        subject: str,
        predicate: str,
        object: Any,  # noqa: A002 - the word of the domain
        *,
        valid_from: datetime | str | None = None,
        valid_to: datetime | str | None = None,
        source: str | None = None,
        supersedes: str | None = None,
    ) -> Fact:
        """Assert a fact; see :meth:`Memory.assert_fact`."""
        out = self._facts(
            "assert_fact",
            namespace=namespace,
            subject=subject,
            predicate=predicate,
            object=object,
            valid_from=valid_from,
            valid_to=valid_to,
            source=source,
            supersedes=supersedes,
        )
        return Fact.from_dict(out)

    def retract_fact(self, fact_id: str) -> Fact:
        """End belief in a fact."""
        return Fact.from_dict(self._facts("retract_fact", fact_id=fact_id))

    def end_fact(self, fact_id: str, valid_to: datetime | str) -> Fact:
        """Record that a fact stopped holding in the world."""
        return Fact.from_dict(self._facts("end_fact", fact_id=fact_id, valid_to=valid_to))

    def add_document(
        self,
        namespace: Namespace | str,
        title: str,
        text: str | Sequence[str],
        *,
        source: str | None = None,
        created_at: datetime | str | None = None,
        chunk_chars: int = DEFAULT_CHUNK_CHARS,
    ) -> Document:
        """Store a source as ordered chunks."""
        out = self._facts(
            "add_document",
            namespace=namespace,
            title=title,
            text=text if isinstance(text, str) else builtins.list(text),
            source=source,
            created_at=created_at,
            chunk_chars=chunk_chars,
        )
        return Document.from_dict(out)

    def add_claim(
        self,
        namespace: Namespace | str,
        text: str,
        *,
        speaker: str | None = None,
        asserted_at: datetime | str | None = None,
        chunk: str | None = None,
        about: Sequence[str] = (),
    ) -> Claim:
        """Record what a source said."""
        out = self._facts(
            "add_claim",
            namespace=namespace,
            text=text,
            speaker=speaker,
            asserted_at=asserted_at,
            chunk=chunk,
            about=about,
        )
        return Claim.from_dict(out)

    def add_claims(self, namespace: Namespace | str, claims: Iterable[Mapping[str, Any]]) -> builtins.list[Claim]:
        """Record many claims in one transaction; see :meth:`Memory.add_claims`."""
        body = []
        for claim in claims:
            record = dict(claim)
            if isinstance(record.get("asserted_at"), datetime):
                record["asserted_at"] = record["asserted_at"].isoformat()
            if isinstance(record.get("about"), tuple):
                record["about"] = builtins.list(record["about"])
            body.append(record)
        answer = self._facts("add_claims", namespace=namespace, claims=body)
        out = answer["claims"] if "claims" in answer else answer["records"]  # "records" before 0.2
        return [Claim.from_dict(c) for c in out]

    def supersede_claim(self, claim_id: str, by: str | None = None) -> Claim:
        """Mark a claim as no longer current testimony."""
        return Claim.from_dict(self._facts("supersede_claim", claim_id=claim_id, by=by))

    def resolve_entity(self, name: str, *, namespace_prefix: Namespace | str = ()) -> Context:
        """A name to one entity, several candidates, or none."""
        return Context.from_dict(self._facts("resolve_entity", name=name, namespace_prefix=namespace_prefix))

    def facts_context(
        self,
        query: str,
        *,
        entity_ids: Sequence[str] | None = None,
        hops: int = 1,
        predicate: str | None = None,
        time: str | Mapping[str, Any] = "current",
        limit: int = 20,
        namespace_prefix: Namespace | str = (),
    ) -> Context:
        """What is true; see :meth:`Memory.facts_context`."""
        out = self._facts(
            "facts_context",
            query=query,
            entity_ids=entity_ids,
            hops=hops,
            predicate=predicate,
            time=time,
            limit=limit,
            namespace_prefix=namespace_prefix,
        )
        return Context.from_dict(out)

    def claims_and_sources_context(
        self,
        query: str,
        *,
        entity_ids: Sequence[str] | None = None,
        k: int = 50,
        candidate_k: int = 200,
        namespace_prefix: Namespace | str = (),
    ) -> Context:
        """What was said; see :meth:`Memory.claims_and_sources_context`."""
        out = self._facts(
            "claims_and_sources_context",
            query=query,
            entity_ids=entity_ids,
            k=k,
            candidate_k=candidate_k,
            namespace_prefix=namespace_prefix,
        )
        return Context.from_dict(out)

    def combined_context(
        self,
        query: str,
        *,
        entity_ids: Sequence[str] | None = None,
        hops: int = 1,
        predicate: str | None = None,
        time: str | Mapping[str, Any] = "current",
        k: int = 50,
        namespace_prefix: Namespace | str = (),
    ) -> Context:
        """Facts and claims side by side; see :meth:`Memory.combined_context`."""
        out = self._facts(
            "combined_context",
            query=query,
            entity_ids=entity_ids,
            hops=hops,
            predicate=predicate,
            time=time,
            k=k,
            namespace_prefix=namespace_prefix,
        )
        return Context.from_dict(out)

    def lookup(self, ids: Sequence[str]) -> builtins.list[Record | None]:
        """Records by id, in order (``None`` if unknown or unseen)."""
        return [record_from_dict(r) for r in self._facts("lookup", ids=ids)["records"]]

    def hydrate(self, ids: Sequence[str]) -> builtins.list[Record | None]:
        """``lookup`` keeping only what is current."""
        return [record_from_dict(r) for r in self._facts("hydrate", ids=ids)["records"]]

    def traverse(
        self, entity_ids: Sequence[str], *, hops: int = 2, time: str | Mapping[str, Any] = "current"
    ) -> Context:
        """Paths of entity-to-entity facts, whole or not at all."""
        return Context.from_dict(self._facts("traverse", entity_ids=entity_ids, hops=hops, time=time))

    def neighbours(self, chunk_id: str, before: int = 1, after: int = 1) -> builtins.list[Chunk]:
        """A chunk with its neighbouring passages."""
        return [
            Chunk.from_dict(c)
            for c in self._facts("neighbours", chunk_id=chunk_id, before=before, after=after)["chunks"]
        ]

    # -- query space ------------------------------------------------------

    def query(
        self,
        sql: str,
        params: Sequence[Any] | Mapping[str, Any] | None = None,
        *,
        max_rows: int = 1000,
        timeout_ms: int = 2000,
    ) -> QueryResult:
        """Run one read-only SELECT over the memory_v1 views; see :meth:`Memory.query`."""
        body = {"sql": sql, "params": _params(params), "max_rows": max_rows, "timeout_ms": timeout_ms}
        return QueryResult.from_dict(self._call("POST", "query", body))

    def explain_query(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> QueryPlan:
        """Whether a statement passes the fence, what it touches, and its plan."""
        return QueryPlan.from_dict(self._call("POST", "query/explain", {"sql": sql, "params": _params(params)}))

    def describe_query_space(self) -> dict[str, Any]:
        """The views with their columns, the allowed functions and the limits."""
        return self._call("POST", "query/space", {})  # type: ignore[no-any-return]

    def search_query_space(self, text: str) -> builtins.list[dict[str, Any]]:
        """Views and columns matching ``text``'s words."""
        return self._call("POST", "query/space/search", {"text": text})["matches"]  # type: ignore[no-any-return]

    def save_query(self, name: str, sql: str, description: str = "") -> SavedQuery:
        """Check and save a statement under ``name``."""
        body = {"name": name, "sql": sql, "description": description}
        return SavedQuery.from_dict(self._call("POST", "query/save", body))

    def run_saved_query(
        self,
        name: str,
        params: Sequence[Any] | Mapping[str, Any] | None = None,
        *,
        max_rows: int = 1000,
        timeout_ms: int = 2000,
    ) -> QueryResult:
        """Run a saved query by name, over what this agent may see."""
        body = {"name": name, "params": _params(params), "max_rows": max_rows, "timeout_ms": timeout_ms}
        return QueryResult.from_dict(self._call("POST", "query/run", body))

    def saved_queries(self) -> builtins.list[SavedQuery]:
        """Every saved query."""
        return [SavedQuery.from_dict(q) for q in self._call("POST", "query/saved", {})["queries"]]

    def delete_saved_query(self, name: str) -> bool:
        """Delete a saved query this agent wrote; ``False`` if there was none."""
        return bool(self._call("POST", "query/delete", {"name": name})["deleted"])


def _params(params: Any) -> Any:
    """Query parameters as JSON: a list stays a list (tuples too), a mapping becomes an object."""
    if isinstance(params, Mapping):
        return dict(params)
    if isinstance(params, tuple):
        return builtins.list(params)
    return params
