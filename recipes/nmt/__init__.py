"""Finding Memo's NMT path, its training side: the seq2seq trainer and the pipeline that trains and scores it.
The study's other files are listed in docs/architecture.md."""
