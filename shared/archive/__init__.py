"""The archive: files under LONGRUN_ARCHIVE_DIR that hold what left Redis (history segments,
finished WorkItems), written by the scheduler's archiver and read by ingress and executors."""
