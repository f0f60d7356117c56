"""Background work as the pages see it: job states, threads, benchmark jobs and progress by stage."""
