/** Counters for `/_emulator/stats`: HTTP requests in flight (and the peak), counts by route and status. */
export class Stats {
  inFlight = 0;
  peakInFlight = 0;
  total = 0;
  readonly byRoute = new Map<string, number>();
  readonly byStatus = new Map<number, number>();
  startedAt = Date.now();

  begin(route: string): void {
    this.total++;
    this.inFlight++;
    if (this.inFlight > this.peakInFlight) this.peakInFlight = this.inFlight;
    this.byRoute.set(route, (this.byRoute.get(route) ?? 0) + 1);
  }

  end(status: number): void {
    this.inFlight--;
    this.byStatus.set(status, (this.byStatus.get(status) ?? 0) + 1);
  }

  /** Starts a new measurement window (peak and counts), e.g. between two runs. */
  reset(): void {
    this.peakInFlight = this.inFlight;
    this.total = 0;
    this.byRoute.clear();
    this.byStatus.clear();
    this.startedAt = Date.now();
  }
}
