"""pyattacker on S3: the ``s3://bucket/prefix/run`` store and the ``s3`` artifact backend."""
