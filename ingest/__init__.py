"""Document ingestion: extract and normalise text, lay out the prompt, prefill once, snapshot state."""
