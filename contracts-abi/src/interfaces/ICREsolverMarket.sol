// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/// @title ICREsolverMarket
/// @notice Full external surface of the CREsolver market: the ABI the resolver engine is built against.
/// @dev Matches the public CREsolver market (Sepolia) function, event, struct and error signatures.
///      `NotMarketCreator` is never thrown by `CREsolverMarket` here but is kept so that reverts from
///      earlier deployments (whose `requestResolution` was creator/owner-only) still decode.
///      `ScoreOutOfRange` is thrown only by this repository's market (the public one accepts scores > 100).
interface ICREsolverMarket {
    // ─── Types ───────────────────────────────────────────────────────────
    struct Market {
        string question;
        uint256 rewardPool;
        uint256 deadline;
        address creator;
        bool resolved;
        bool resolution;
    }

    // ─── Events ──────────────────────────────────────────────────────────
    event MarketCreated(
        uint256 indexed marketId, address indexed creator, string question, uint256 rewardPool, uint256 deadline
    );
    event WorkerJoined(uint256 indexed marketId, address indexed worker, uint256 stake, uint256 agentId);
    event ResolutionRequested(uint256 indexed marketId, string question);
    event MarketResolved(uint256 indexed marketId, address indexed resolver, bool resolution);
    event ResolverUpdated(address indexed resolver, bool authorized);
    event Withdrawal(address indexed account, uint256 amount);
    event OwnershipTransferred(address indexed previousOwner, address indexed newOwner);

    // ─── Errors ──────────────────────────────────────────────────────────
    error EmptyQuestion();
    error ZeroValue();
    error InvalidDuration();
    error MarketNotActive(uint256 marketId);
    error BelowMinStake(uint256 sent, uint256 required);
    error AlreadyJoined(uint256 marketId, address worker);
    error Unauthorized(address caller);
    error AlreadyResolved(uint256 marketId);
    error TooManyWorkers(uint256 count, uint256 max);
    error ArrayMismatch(uint256 workersLen, uint256 weightsLen, uint256 scoresLen);
    error UnregisteredWorker(uint256 marketId, address worker);
    error NoBalance();
    error MarketDoesNotExist(uint256 marketId);
    error MarketAlreadyResolved(uint256 marketId);
    error NotMarketCreator(uint256 marketId, address caller);
    error NotAgentOwner(address caller, uint256 agentId);
    error ZeroAddress();
    error DuplicateWorker(uint256 marketId, address worker);
    error WorkerSetMismatch(uint256 marketId, uint256 expected, uint256 provided);
    error ZeroTotalWeight(uint256 marketId);
    error ScoreOutOfRange(uint256 marketId, address worker, uint8 score);
    error OwnableUnauthorizedAccount(address account);
    error OwnableInvalidOwner(address owner);
    error ReentrancyGuardReentrantCall();

    // ─── Writes ──────────────────────────────────────────────────────────
    function createMarket(string calldata question, uint256 duration) external payable returns (uint256 marketId);
    function joinMarket(uint256 marketId, uint256 agentId) external payable;
    function requestResolution(uint256 marketId) external;
    function resolveMarket(
        uint256 marketId,
        address[] calldata workers,
        uint256[] calldata weights,
        uint8[] calldata dimScores,
        bool resolution
    ) external;
    function withdraw() external;
    function setAuthorizedResolver(address resolver, bool authorized) external;
    function transferOwnership(address newOwner) external;
    function renounceOwnership() external;

    // ─── Views ───────────────────────────────────────────────────────────
    function getMarket(uint256 marketId) external view returns (Market memory);
    function markets(uint256 marketId)
        external
        view
        returns (
            string memory question,
            uint256 rewardPool,
            uint256 deadline,
            address creator,
            bool resolved,
            bool resolution
        );
    function getMarketWorkers(uint256 marketId) external view returns (address[] memory);
    function workerAgentIds(uint256 marketId, address worker) external view returns (uint256);
    function stakes(uint256 marketId, address worker) external view returns (uint256);
    function balances(address account) external view returns (uint256);
    function authorizedResolvers(address resolver) external view returns (bool);
    function isMarketActive(uint256 marketId) external view returns (bool);
    function marketCount() external view returns (uint256);
    function minStake() external view returns (uint256);
    function MAX_WORKERS() external view returns (uint256);
    function identityRegistry() external view returns (address);
    function reputationRegistry() external view returns (address);
    function owner() external view returns (address);
    function reputation(address worker)
        external
        view
        returns (uint256 resQualitySum, uint256 srcQualitySum, uint256 analysisDepthSum, uint256 count);
    function getReputation(address worker)
        external
        view
        returns (uint256 resQuality, uint256 srcQuality, uint256 analysisDepth, uint256 count);
    function getScoringCriteria() external pure returns (string[8] memory names, uint256[8] memory weights);
}
