"""Built-in haystack corpora, one folder each of gzip-compressed UTF-8 texts (``*.txt.gz``)."""
