/**
 * A sleep whose timer is kept in `timers` while it runs, so that whoever owns them can clear
 * every pending one on close (the fault proxy's delays, the region proxy's latencies).
 */
export const trackedSleep =
  (timers: Set<NodeJS.Timeout>) =>
  (ms: number): Promise<void> =>
    new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        timers.delete(timer);
        resolve();
      }, ms);
      timers.add(timer);
    });
