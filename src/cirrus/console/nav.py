"""The console's navigation: each page and the permission it needs; a principal sees only what it may use."""

from dataclasses import dataclass

from cirrus.auth import Permission, Principal


@dataclass(frozen=True)
class NavItem:
    label: str
    path: str
    permission: Permission


PAGES = (
    NavItem("Overview", "/console/overview", Permission.READ_USAGE),
    NavItem("Playground", "/console/playground", Permission.RUN),
    NavItem("Models", "/console/models", Permission.RUN),
    NavItem("Usage", "/console/usage", Permission.READ_USAGE),
    NavItem("Logs", "/console/logs", Permission.READ_USAGE),
    NavItem("Keys", "/console/keys", Permission.ADMIN),
    NavItem("Nodes", "/console/nodes", Permission.ADMIN),
)


@dataclass(frozen=True)
class NavLink:
    label: str
    path: str
    current: bool


def nav_for(principal: Principal, current_path: str) -> list[NavLink]:
    return [
        NavLink(item.label, item.path, current_path.startswith(item.path))
        for item in PAGES
        if principal.can(item.permission)
    ]
