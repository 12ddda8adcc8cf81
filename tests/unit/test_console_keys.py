"""The Keys page's forms: read with the rules of `cirrus tokens create` and `cirrus accounts set`, and what they
give the identity store creates the token the form described."""

from pathlib import Path

import pytest

from cirrus.auth import Permission
from cirrus.auth.store import IdentityStore, Plan
from cirrus.console.pages.keys import token_state
from cirrus.console.pages.keys_forms import AccountSettings, FormError, NewAccount, NewToken
from cirrus.db.sqlite import SqliteDatabase


def test_a_full_token_form_is_read_like_the_cli() -> None:
    wanted = NewToken.parse(
        {
            "account": "acme",
            "name": " ci ",
            "models": "@cf/huggingface/*, @cf/google/*",
            "perm_run": "on",
            "perm_admin": "on",
            "expires_in": "30d",
            "rpm": "60",
            "tpm": "",
            "monthly_limit_usd": "5",
            "collect_log": "on",
        }
    )
    assert wanted == NewToken(
        account_id="acme",
        name="ci",
        model_patterns=("@cf/huggingface/*", "@cf/google/*"),
        permissions=(Permission.RUN, Permission.ADMIN),
        expires_in_s=30 * 86400.0,
        requests_per_minute=60,
        tokens_per_minute=None,
        monthly_spend_limit_usd=5.0,
        collect_log=True,
    )


def test_an_empty_model_field_means_every_model() -> None:
    wanted = NewToken.parse({"account": "a", "name": "n", "perm_read_usage": "on", "models": "  "})
    assert wanted.model_patterns == ("*",)
    assert wanted.permissions == (Permission.READ_USAGE,)
    assert (wanted.expires_in_s, wanted.monthly_spend_limit_usd, wanted.collect_log) == (None, None, False)


@pytest.mark.parametrize(
    ("fields", "complaint"),
    [
        ({"name": "", "perm_run": "on"}, "name"),
        ({"name": "n"}, "permission"),
        ({"name": "n", "perm_run": "on", "expires_in": "soon"}, "duration"),
        ({"name": "n", "perm_run": "on", "rpm": "0"}, "Requests per minute"),
        ({"name": "n", "perm_run": "on", "tpm": "1.5"}, "Tokens per minute"),
        ({"name": "n", "perm_run": "on", "monthly_limit_usd": "-1"}, "monthly limit"),
        ({"name": "n", "perm_run": "on", "monthly_limit_usd": "nan"}, "monthly limit"),
    ],
)
def test_bad_token_fields_are_named(fields: dict[str, str], complaint: str) -> None:
    with pytest.raises(FormError, match=complaint):
        NewToken.parse({"account": "a", **fields})


def test_account_settings_keep_patterns_once_and_refuse_bad_ones() -> None:
    settings = AccountSettings.parse(
        {"plan": "paid", "daily_free_neurons": "", "deny_patterns": "forbidden\\s+fruit\n\nsecret\nsecret\n"}
    )
    assert settings == AccountSettings(Plan.PAID, None, ("forbidden\\s+fruit", "secret"))
    assert AccountSettings.parse({"plan": "free", "daily_free_neurons": "250"}).daily_free_neurons == 250.0
    for fields in (
        {"plan": "gold"},
        {"plan": "free", "deny_patterns": "(unclosed"},
        {"plan": "free", "deny_patterns": ".*"},
    ):
        with pytest.raises(FormError):
            AccountSettings.parse(fields)
    with pytest.raises(FormError):
        NewAccount.parse({"name": " "})
    assert NewAccount.parse({"name": "acme", "plan": "paid", "account_id": ""}) == NewAccount(
        "acme", Plan.PAID, None
    )


async def test_the_form_creates_the_token_it_describes(tmp_path: Path) -> None:
    db = SqliteDatabase.open(str(tmp_path / "cirrus.db"))
    try:
        identity = IdentityStore(db)
        await identity.migrate()
        account = await identity.create_account("acme")
        wanted = NewToken.parse(
            {"account": account.id, "name": "ci", "perm_run": "on", "rpm": "7", "monthly_limit_usd": "2.5"}
        )
        secret, token = await identity.create_token(
            wanted.account_id, wanted.name, **wanted.store_arguments()
        )
        principal = await identity.authenticate(secret)
        assert principal is not None and principal.token_id == token.id
        assert (principal.requests_per_minute, principal.monthly_spend_limit_usd) == (7, 2.5)
        assert principal.permissions == frozenset({Permission.RUN})
        assert token_state(token, token.created_at) == "active"
        await identity.revoke_token(token.id)
        revoked = await identity.get_token(token.id)
        assert revoked is not None and token_state(revoked, token.created_at) == "revoked"
    finally:
        await db.close()
