"""The console: server-rendered web pages (Overview, Playground, Usage, Keys, Logs, Models) on the API's port.

An adapter at the level of `cirrus.api`: it reads the same services the APIs use and nothing below imports it.
"""
