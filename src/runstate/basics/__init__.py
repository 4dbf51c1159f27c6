"""Vocabulary and small tools shared by the server and the SDK: the status enums,
typed JSON reading, generated constructors, bounded maps, shared in-flight work.
Imports nothing else of runstate."""
