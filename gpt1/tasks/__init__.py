"""Fine-tuning tasks: the table (registry), the mirror's file formats (mirror_formats), the
generic reader and writer of canonical tables (load), their gate, and the four input
transformations (formats)."""
