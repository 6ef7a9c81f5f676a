"""Durable, segmented, append-only sample log (see ``log.SampleLog``)."""

from trainer.store.log import LogLimits, SampleLog
from trainer.store.record import STORED_FIELDS, FlushRecord, Layout, RowsRecord

__all__ = ["STORED_FIELDS", "FlushRecord", "Layout", "LogLimits", "RowsRecord", "SampleLog"]
