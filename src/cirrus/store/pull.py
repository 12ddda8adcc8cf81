"""Pull a GGUF model artifact from an OCI registry into the local content-addressed cache.

Blobs stream into the local store's partial file (`cirrus.store.blobs`, locked against a second writer), never
past the manifest's size; the finished file is hashed and refused (partial deleted, nothing cached) unless its
digest and size are the manifest's, else fsynced and renamed to `blobs/sha256/<hex>`. An interrupted download
keeps its partial file, and the next pull asks the registry only for the rest, with an HTTP Range request.

Beside the blobs, `oci/<registry>/<repository>/<tag or digest>.json` keeps the manifest a reference last
resolved to, so a cached model is found without the network.

A registry that answers 401 is answered by `cirrus.store.registry_auth` (anonymous or credentialed bearer
tokens, or HTTP Basic), with the credentials the Puller was given.
"""

import asyncio
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import httpx

from cirrus.store import blobs
from cirrus.store.atomic import write_bytes_atomic
from cirrus.store.blobs import BlobBusy, BlobError, BlobStore
from cirrus.store.oci import (
    OCI_MANIFEST_MEDIA_TYPE,
    Descriptor,
    DigestMismatch,
    NotARegistry,
    Reference,
    ReferenceNotFound,
    RegistryError,
    RegistryUnreachable,
    config_descriptor,
    gguf_layer,
)
from cirrus.store.registry_auth import RegistryAuth, TokenCache
from cirrus.store.registry_credentials import CredentialStore, default_docker_config

CHUNK_BYTES = 1 << 20
MAX_MANIFEST_BYTES = 4 << 20
MAX_CONFIG_BYTES = 4 << 20
CONTENT_RANGE = re.compile(r"bytes (\d+)-\d+/(?:\d+|\*)")
TIMEOUT = httpx.Timeout(30.0, connect=5.0)
MANIFEST_ACCEPT = f"{OCI_MANIFEST_MEDIA_TYPE}, application/vnd.docker.distribution.manifest.v2+json"


@dataclass(frozen=True)
class PulledModel:
    reference: Reference
    path: Path  # the GGUF, at blobs/sha256/<hex>
    digest: str
    config: dict[str, Any]  # Docker's model config; Cirrus's artifact manifest is config["cirrus"]


def _index_path(store_root: Path, reference: Reference) -> Path:
    return store_root / "oci" / reference.registry / reference.repository / f"{reference.version}.json"


def cached_model(store_root: Path, reference: Reference) -> Path | None:
    """The GGUF a reference resolved to when it was last pulled, if it is still cached; never touches the network."""
    try:
        manifest = json.loads(_index_path(store_root, reference).read_bytes())
        path = BlobStore(store_root).path(gguf_layer(manifest).digest)
    except (OSError, ValueError, RegistryError, BlobError):
        return None
    return path if path.is_file() else None


class Puller:
    """Pulls references into `store_root`; concurrent pulls of one reference share a single download."""

    def __init__(self, store_root: Path, credentials: CredentialStore | None = None) -> None:
        """`credentials` default to the Docker config's; `CredentialStore.from_settings` adds Cirrus's own."""
        self.store_root = store_root
        self._store = BlobStore(store_root)
        self._flights: dict[str, asyncio.Task[PulledModel]] = {}
        self._blob_flights: dict[str, asyncio.Task[Path]] = {}  # per digest: two references, one download
        self._credentials = credentials or CredentialStore(docker_config=default_docker_config())
        self._tokens = TokenCache()

    async def fetch(self, reference: str, insecure: bool = False) -> Path:
        """The cached GGUF for a reference, pulling it first if it is not cached."""
        ref = Reference.parse(reference)
        cached = await asyncio.to_thread(cached_model, self.store_root, ref)
        return cached if cached is not None else (await self.pull(reference, insecure)).path

    async def pull(self, reference: str, insecure: bool = False) -> PulledModel:
        ref = Reference.parse(reference)
        key = str(ref)
        flight = self._flights.get(key)
        if flight is None:
            flight = asyncio.create_task(self._pull(ref, insecure), name=f"pull {key}")
            self._flights[key] = flight
            flight.add_done_callback(lambda done: self._landed(key, done))
        # A caller that gives up (its request was cancelled) must not cancel the pull the others wait for.
        return await asyncio.shield(flight)

    def _landed(self, key: str, flight: "asyncio.Task[PulledModel]") -> None:
        self._flights.pop(key, None)
        if not flight.cancelled():
            flight.exception()  # retrieved here, so a pull nobody awaits any more logs no warning

    async def _fetch_blob(self, client: httpx.AsyncClient, ref: Reference, blob: Descriptor) -> Path:
        flight = self._blob_flights.get(blob.digest)
        if flight is None:
            flight = asyncio.create_task(
                _fetch_blob(client, ref, blob, self._store), name=f"blob {blob.digest}"
            )
            self._blob_flights[blob.digest] = flight
            flight.add_done_callback(lambda done: self._blob_landed(blob.digest, done))
        return await asyncio.shield(flight)

    def _blob_landed(self, digest: str, flight: "asyncio.Task[Path]") -> None:
        if self._blob_flights.get(digest) is flight:
            del self._blob_flights[digest]
        if not flight.cancelled():
            flight.exception()

    async def _pull(self, ref: Reference, insecure: bool) -> PulledModel:
        base = ref.base_url(insecure)
        credentials = self._credentials.for_registry(ref.registry)
        auth = RegistryAuth(ref.registry, ref.repository, credentials, self._tokens, str(ref))
        async with httpx.AsyncClient(
            base_url=base, timeout=TIMEOUT, follow_redirects=True, auth=auth
        ) as client:
            try:
                raw, manifest = await _fetch_manifest(client, ref)
                config_blob = await self._fetch_blob(
                    client, ref, _small_config(config_descriptor(manifest), ref)
                )
                layer = gguf_layer(manifest)
                path = await self._fetch_blob(client, ref, layer)
            except httpx.TransportError as exc:
                raise RegistryUnreachable(
                    f"lost the registry at {base} while pulling {ref}: {type(exc).__name__}: {exc}"
                    " (a download in progress resumes on the next pull)"
                ) from exc
        config = _json_object(config_blob.read_bytes(), f"the config blob of {ref}")
        index = _index_path(self.store_root, ref)
        await asyncio.to_thread(write_bytes_atomic, index, raw, self._store.scratch)
        return PulledModel(ref, path, layer.digest, config)


async def _fetch_manifest(client: httpx.AsyncClient, ref: Reference) -> tuple[bytes, dict[str, Any]]:
    try:
        response = await client.get(ref.manifest_path(), headers={"Accept": MANIFEST_ACCEPT})
    except httpx.TransportError as exc:
        raise RegistryUnreachable(
            f"cannot reach the registry at {client.base_url}: {type(exc).__name__}: {exc}"
        ) from exc
    _raise_for_status(response, ref, "manifest")
    raw = response.content
    if len(raw) > MAX_MANIFEST_BYTES:
        raise NotARegistry(
            f"{client.base_url} sent a {len(raw)}-byte manifest for {ref}; not a registry's answer"
        )
    if ref.digest and f"sha256:{hashlib.sha256(raw).hexdigest()}" != ref.digest:
        raise DigestMismatch(f"the manifest of {ref} does not match its digest; refusing it")
    return raw, _json_object(raw, f"the manifest of {ref} from {client.base_url}")


def _small_config(config: Descriptor, ref: Reference) -> Descriptor:
    if config.size > MAX_CONFIG_BYTES:
        raise NotARegistry(
            f"{ref}: its config blob is {config.size} bytes, more than a model config needs"
            f" ({MAX_CONFIG_BYTES}); refusing it"
        )
    return config


def _json_object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise NotARegistry(f"{what} is not a JSON object; is that address an OCI registry?")
    return value


def _raise_for_status(response: httpx.Response, ref: Reference, what: str) -> None:
    if response.status_code in (200, 206):
        return
    if response.status_code == 404:
        raise ReferenceNotFound(f"{ref}: the registry has no such {what} (HTTP 404)")
    raise NotARegistry(f"{ref}: the registry answered HTTP {response.status_code} for the {what}")


async def _fetch_blob(client: httpx.AsyncClient, ref: Reference, blob: Descriptor, store: BlobStore) -> Path:
    if store.has(blob.digest):
        return store.path(blob.digest)
    try:
        partial = store.open_partial(blob.digest)
    except BlobBusy as exc:
        raise RegistryError(
            f"{ref}: another process is pulling blob {blob.digest}; try again shortly"
        ) from exc
    with partial:
        if partial.stored is not None:
            return partial.stored.path
        if partial.offset > blob.size:
            partial.stream.truncate(0)
            partial.offset = 0
        if partial.offset < blob.size:
            await _download(client, ref, blob, partial.stream, partial.offset)
        return await asyncio.to_thread(_commit, partial, blob, ref)


async def _download(
    client: httpx.AsyncClient, ref: Reference, blob: Descriptor, out: BinaryIO, offset: int
) -> None:
    """Append the blob's bytes from `offset` on (a Range request when resuming), never past its size."""
    headers = {"Range": f"bytes={offset}-"} if offset else {}
    async with client.stream("GET", ref.blob_path(blob.digest), headers=headers) as response:
        _raise_for_status(response, ref, f"blob {blob.digest}")
        resumed = resumed_at(offset, response.status_code, response.headers.get("Content-Range"))
        if resumed is None:  # a part that starts elsewhere: ask for the whole blob instead
            if not offset:
                raise NotARegistry(f"{ref}: the registry sent an unasked-for part of blob {blob.digest}")
            await response.aclose()
            out.truncate(0)
            await _download(client, ref, blob, out, 0)
            return
        if resumed != offset:  # the registry ignored the Range: start again
            out.truncate(0)
            offset = 0
        remaining = blob.size - offset
        async for chunk in response.aiter_bytes(CHUNK_BYTES):
            out.write(chunk[: max(remaining, 0) + 1])  # one byte too many is enough for the check to refuse
            remaining -= len(chunk)
            if remaining < 0:
                break
    out.flush()
    os.fsync(out.fileno())


def resumed_at(offset: int, status: int, content_range: str | None) -> int | None:
    """Where a blob response's body starts: `offset` for a 206 that starts there, 0 for a whole body (200), None
    for a 206 that starts anywhere else (or says nowhere)."""
    if status != 206:
        return 0
    match = CONTENT_RANGE.fullmatch((content_range or "").strip())
    return offset if match is not None and int(match.group(1)) == offset else None


def _commit(partial: blobs.Partial, blob: Descriptor, ref: Reference) -> Path:
    """Hash the finished partial file (still locked) and store it under its digest; refuse anything else."""
    try:
        return partial.commit(blob.size).path
    except blobs.DigestMismatch as exc:
        raise DigestMismatch(f"{ref}: blob {blob.digest} refused, nothing cached: {exc}") from exc
