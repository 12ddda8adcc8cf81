"""Workers AI's fine-tune management, under `/ai` and the account's prefix: `POST /ai/finetunes` (`model`, `name`,
`description`) creates one, `GET /ai/finetunes` lists the account's, `GET /ai/finetunes/{id}` reads one (by id or
name), `DELETE` removes one, and `POST /ai/finetunes/{id}/finetune-assets` uploads one of its two PEFT files
(multipart: `file_name` and `file`). Once both are uploaded the finetune is converted and ready for `lora`.

Finetunes belong to the account of the token that made them: another account's is not found. A token restricted
to some models sees, uploads to and deletes only the finetunes of those models (another's is 403, as creating one
is). The upload route takes bodies up to the asset limit (300 MiB) plus the form's overhead, whatever the server's
body limit, and refuses before it reads any of it when the finetune cannot take an upload.
"""

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, field_validator

from cirrus.api.context import platform_of, principal_of, run_account
from cirrus.api.path_parameters import ACCOUNT_PREFIX, account_parameter
from cirrus.api.workers_ai.schemas import envelope
from cirrus.errors import InvalidInput, ModelForbidden, NotFound
from cirrus.finetunes import NAME_PATTERN, NAME_RULE, Asset, Finetune
from cirrus.finetunes.assets import AssetLimits, AssetUploads, lora_base_model
from cirrus.finetunes.form import read_form
from cirrus.store.local import LocalStore

router = APIRouter(tags=["Workers AI"])
PREFIXES = ("/ai", f"{ACCOUNT_PREFIX}/ai")
FORM_OVERHEAD_BYTES = 1024 * 1024
PUBLIC = "public"  # GET /ai/finetunes/public: Workers AI's public finetunes (none here)
ASSET_UPLOAD_PATH = re.compile(r"(?:/client/v4/accounts/[^/]+)?/ai/finetunes/[^/]+/finetune-assets/?")
UPLOAD_BODY = {
    "required": True,
    "content": {
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "required": ["file_name", "file"],
                "properties": {
                    "file_name": {"type": "string", "enum": [asset.value for asset in Asset]},
                    "file": {"type": "string", "format": "binary"},
                },
            }
        }
    },
}


class FinetuneCreate(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1, description="the base model, a catalog model that takes LoRA adapters")
    name: str = Field(description=f"unique in the account: {NAME_RULE}")
    description: str | None = Field(default=None, max_length=1024)
    public: bool = Field(default=False, description="always false: a finetune is its account's alone")

    @field_validator("name")
    @classmethod
    def _valid_name(cls, name: str) -> str:
        if not NAME_PATTERN.fullmatch(name):
            raise ValueError(f"a finetune's name is {NAME_RULE}, not {name!r}")
        if name == PUBLIC:
            raise ValueError(f"'{PUBLIC}' names the list of public finetunes: choose another name")
        return name

    @field_validator("public")
    @classmethod
    def _private(cls, public: bool) -> bool:
        if public:
            raise ValueError("public finetunes are not offered: a finetune serves its own account only")
        return public


def finetune_record(finetune: Finetune) -> dict[str, Any]:
    """Workers AI's record, plus which assets were uploaded and whether requests may use it yet."""
    return {
        "id": finetune.id,
        "name": finetune.name,
        "description": finetune.description,
        "model": finetune.model,
        "created_at": _timestamp(finetune.created_at),
        "modified_at": _timestamp(finetune.modified_at),
        "public": False,
        "assets": [asset.value for asset in finetune.uploaded],
        "ready": finetune.ready,
    }


def _timestamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


async def _finetune(request: Request, ref: str) -> Finetune:
    """The account's finetune `ref` (by id or name), if the token may use its model (as creating it needed)."""
    found = await platform_of(request).gateway.finetunes.find(run_account(request), ref)
    if found is None:
        raise NotFound(f"no finetune '{ref}' in this account", param="finetune_id")
    if not principal_of(request).may_use(found.model):
        raise ModelForbidden(f"this token may not use {found.model}, the model of finetune '{ref}'")
    return found


async def create_finetune(request: Request, body: FinetuneCreate) -> Any:
    account = run_account(request)
    platform = platform_of(request)
    if not principal_of(request).may_use(body.model):
        raise ModelForbidden(f"this token may not use {body.model}", param="model")
    spec = lora_base_model(platform.catalog, body.model)
    finetune = await platform.gateway.finetunes.create(account, body.name, spec.id, body.description)
    return envelope(finetune_record(finetune))


async def list_finetunes(request: Request) -> Any:
    """Only those of models the token may use: the others it could neither run, upload to nor delete."""
    found = await platform_of(request).gateway.finetunes.list(run_account(request))
    principal = principal_of(request)
    return envelope([finetune_record(finetune) for finetune in found if principal.may_use(finetune.model)])


async def list_public_finetunes(request: Request) -> Any:
    run_account(request)
    return envelope([])


async def get_finetune(finetune_id: str, request: Request) -> Any:
    return envelope(finetune_record(await _finetune(request, finetune_id)))


async def delete_finetune(finetune_id: str, request: Request) -> Any:
    found = await _finetune(request, finetune_id)
    if not await platform_of(request).gateway.finetunes.delete(found.account_id, found.id):
        raise NotFound(f"no finetune '{finetune_id}' in this account", param="finetune_id")
    return envelope({"id": found.id, "deleted": True})


async def upload_asset(finetune_id: str, request: Request) -> Any:
    """The finetune is looked up, and must take assets, before the body is read: a refusal costs no upload.
    AssetUploads.upload looks it up again once the file is in, as it may have changed meanwhile."""
    finetune = await _finetune(request, finetune_id)
    uploads = _uploads(request)
    uploads.open_for_upload(finetune)
    limit = platform_of(request).settings.finetune_max_asset_bytes
    with uploads.staging() as folder:
        staged = Path(folder) / "upload"
        form = await read_form(request.stream(), request.headers.get("content-type", ""), staged, limit)
        asset = _asset(form.fields.get("file_name") or form.filename)
        if not form.has_file:
            raise InvalidInput(f"the form has no 'file' part: send {asset.value} as 'file'", param="file")
        if form.file_bytes > limit:
            raise InvalidInput(
                f"{asset.value}: it is {form.file_bytes:,} bytes; an adapter file may be at most {limit:,} bytes",
                param="file",
            )
        finetune = await uploads.upload(finetune.account_id, finetune_id, asset, staged)
    return envelope(finetune_record(finetune))


def _asset(file_name: str | None) -> Asset:
    names = " or ".join(f"'{asset.value}'" for asset in Asset)
    if not file_name:
        raise InvalidInput(f"the form has no 'file_name': name the file {names}", param="file_name")
    try:
        return Asset(file_name)
    except ValueError:
        raise InvalidInput(
            f"'file_name' is {file_name!r}; a finetune's files are {names}", param="file_name"
        ) from None


def _uploads(request: Request) -> AssetUploads:
    """One per app: its lock lets one adapter convert at a time."""
    uploads = getattr(request.app.state, "finetune_uploads", None)
    if uploads is None:
        platform = platform_of(request)
        settings = platform.settings
        limits = AssetLimits(
            settings.finetune_max_rank, settings.finetune_max_asset_bytes, settings.finetune_convert_timeout_s
        )
        blobs = LocalStore.from_settings(settings).blobs
        store = platform.gateway.finetunes
        uploads = AssetUploads(store, blobs, platform.catalog, platform.launcher, limits)
        request.app.state.finetune_uploads = uploads
    assert isinstance(uploads, AssetUploads)
    return uploads


for _prefix in PREFIXES:
    _extra = account_parameter(_prefix)
    router.add_api_route(
        f"{_prefix}/finetunes",
        create_finetune,
        methods=["POST"],
        summary="Create a finetune",
        openapi_extra=_extra,
    )
    router.add_api_route(
        f"{_prefix}/finetunes",
        list_finetunes,
        methods=["GET"],
        summary="List finetunes",
        openapi_extra=_extra,
    )
    router.add_api_route(
        f"{_prefix}/finetunes/{PUBLIC}",
        list_public_finetunes,
        methods=["GET"],
        summary="List public finetunes (none: finetunes are private)",
        openapi_extra=_extra,
    )
    router.add_api_route(
        f"{_prefix}/finetunes/{{finetune_id}}",
        get_finetune,
        methods=["GET"],
        summary="Get a finetune",
        openapi_extra=_extra,
    )
    router.add_api_route(
        f"{_prefix}/finetunes/{{finetune_id}}",
        delete_finetune,
        methods=["DELETE"],
        summary="Delete a finetune",
        openapi_extra=_extra,
    )
    router.add_api_route(
        f"{_prefix}/finetunes/{{finetune_id}}/finetune-assets",
        upload_asset,
        methods=["POST"],
        summary="Upload a finetune's adapter_config.json or adapter_model.safetensors",
        openapi_extra={**_extra, "requestBody": UPLOAD_BODY},
    )
