"""Files of OpenAI's Files API: uploads (a batch's input) and the output and error files of batches."""

from cirrus.files.store import FileState, FileStore, MadeFile, StoredFile

__all__ = ["FileState", "FileStore", "MadeFile", "StoredFile"]
