"""The pipeline that trains, measures and documents the bundled SmolLM2 drafts (``flashspec_hf/assistants/``):
``python -m draft_release.<script>`` from the repository root; README.md says the order."""
