"""Transfer evaluation: few-shot linear (closed-form ridge), fine-tuning, upstream top-1."""
