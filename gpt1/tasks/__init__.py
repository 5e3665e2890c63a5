"""Fine-tuning tasks: the table (registry), readers (load) and input transformations (formats)."""
