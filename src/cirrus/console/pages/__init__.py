"""One module per console page, each exporting `router: APIRouter`."""
